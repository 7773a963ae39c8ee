//go:build !race

package peers

// raceDetector reports whether the race detector is on.
const raceDetector = false
