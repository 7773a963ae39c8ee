//go:build !race

package remote_test

// raceDetector reports whether the race detector is on.
const raceDetector = false
