package entity_test

import (
	"reflect"
	"testing"

	"github.com/shoal-dev/shoal/entity"
)

// The runtime's hooks for sharding and eventsourced are functions of the
// internal runtime, not methods: entity's types are aliases, and an alias
// carries every method of its type, so a method here would be a user's to
// call (see docs/DESIGN.md, 'Packages').
func TestUserTypesCarryNoRuntimeHooks(t *testing.T) {
	hooks := []string{
		"Seal", "TellUnsealed", "Mark", "Post", "PostOrdered", "Suspend", "Resume", "Fail", "Owner", "Behavior",
		"StartRecovery", "RunInOrder", "DeliverReply", "DeliverLocalReply", "FailAsk", "FailAsks",
		"SetReplyRouter", "DeadLetter", "EntityDeadLetter", "TellTraced",
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[*entity.Cell[string]](),
		reflect.TypeFor[*entity.System](),
		reflect.TypeFor[entity.Context[string]](),
		reflect.TypeFor[entity.Ref[string]](),
		reflect.TypeFor[entity.ReplyTo[string]](),
		reflect.TypeFor[*entity.Props[string]](),
		reflect.TypeFor[*entity.Config](),
	} {
		for _, name := range hooks {
			if _, ok := typ.MethodByName(name); ok {
				t.Errorf("%v has the runtime hook %s as a method; users could call it", typ, name)
			}
		}
	}
}
