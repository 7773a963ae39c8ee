//go:build !race

package runtime

// raceDetector reports whether the race detector is on.
const raceDetector = false
