//go:build unix

package tcp

import "syscall"

// writeNow makes one non-blocking write(2) of buf to raw's socket and
// returns how much of it went; 0 when the socket takes nothing now or is
// broken (the link's goroutine then writes buf, or finds out).
func writeNow(raw syscall.RawConn, buf []byte) int {
	var n int
	err := raw.Write(func(fd uintptr) bool {
		n, _ = syscall.Write(int(fd), buf)
		return true // never wait for the socket: the link's goroutine does
	})
	if err != nil || n < 0 {
		return 0
	}
	return n
}
