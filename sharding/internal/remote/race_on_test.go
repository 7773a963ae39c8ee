//go:build race

package remote_test

// raceDetector reports whether the race detector is on: it makes
// sync.Pool drop what it is given now and then, so allocation counts do
// not hold.
const raceDetector = true
