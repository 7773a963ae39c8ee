package main

import (
	"fmt"
	"testing"
)

// zeroPad and padRight format as the fmt verbs they replace.
func TestPaddingMatchesFmt(t *testing.T) {
	for _, n := range []int64{0, 7, 42, 99_999, 100_000, 123_456_789_012, 9_999_999_999_999, -1, -42, -9223372036854775808, 9223372036854775807} {
		for _, width := range []int{0, 1, 5, 12, 20} {
			if got, want := zeroPad(n, width), fmt.Sprintf("%0*d", width, n); got != want {
				t.Errorf("zeroPad(%d, %d) = %q, want %q", n, width, got, want)
			}
		}
	}
	for _, s := range []string{"", "store1", "exactly15chars!", "longer than fifteen", "店舗1", "ｓｔｏｒｅ"} {
		if got, want := padRight(s, 15), fmt.Sprintf("%-15s", s); got != want {
			t.Errorf("padRight(%q, 15) = %q, want %q", s, got, want)
		}
	}
}
