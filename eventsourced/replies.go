package eventsourced

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/shoal-dev/shoal/entity"
)

// ErrMissingReply matches a MissingReplyError.
var ErrMissingReply = errors.New("eventsourced: command carries a ReplyTo but its effect does not decide the reply")

// MissingReplyError is a Config.EnforcedReplies violation: a command that
// carries a ReplyTo was answered by an effect that neither replies, nor says
// NoReply, nor stashes the command.
type MissingReplyError struct {
	PersistenceID string     // the entity's event stream
	Command       string     // the command's type, as %T prints it
	Effect        EffectKind // what the effect did instead
}

// Error implements error.
func (e *MissingReplyError) Error() string {
	return fmt.Sprintf("%v: %s: %s got a %v effect with no ThenReply or ThenNoReply", ErrMissingReply, e.PersistenceID, e.Command, e.Effect)
}

// Unwrap makes the error match ErrMissingReply.
func (e *MissingReplyError) Unwrap() error { return ErrMissingReply }

// replyToPkg is where ReplyTo lives; a field of a type named ReplyTo[...]
// from there is a reply address.
var replyToPkg = reflect.TypeFor[entity.ReplyTo[struct{}]]().PkgPath()

// carriesReplyTo reports whether cmd (or the struct a pointer cmd points
// to) has a field of type entity.ReplyTo[R], whatever R, at its top level
// or in an embedded struct.
func carriesReplyTo(cmd any) bool {
	t := reflect.TypeOf(cmd)
	if t == nil {
		return false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return structCarriesReplyTo(t)
}

func structCarriesReplyTo(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if isReplyTo(f.Type) || (f.Anonymous && structCarriesReplyTo(f.Type)) {
			return true
		}
	}
	return false
}

func isReplyTo(t reflect.Type) bool {
	return t.PkgPath() == replyToPkg && strings.HasPrefix(t.Name(), "ReplyTo[")
}
