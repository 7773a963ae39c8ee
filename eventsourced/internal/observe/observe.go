// Package observe is the seam between an event-sourced behavior and the
// testkit that watches it: eventsourcedtest attributes every write to the
// message that caused it through an Observer, which users never need.
package observe

// Observer sees what an event-sourced behavior does, on the entity's
// goroutine, so that a testkit can attribute every write to the message
// that caused it (a timer message, a piped result, an unstashed command).
// A behavior takes one through its Observe(Observer) method.
type Observer interface {
	// Handling is called before the command handler runs for msg.
	Handling(msg any)
	// Persisting is called when the effect of the message being handled
	// writes the events numbered first to last. The write may still fail.
	Persisting(first, last uint64)
}
