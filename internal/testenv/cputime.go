package testenv

import (
	"syscall"
	"time"
)

// CPUTime is the process's user + system CPU time so far: what benchmarks
// report per operation, the figure that means something on a machine
// shared with other work.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
