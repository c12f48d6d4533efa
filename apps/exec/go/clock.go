// The Go runtime's clocks (time.Now, time.Since, timers), which it reads
// through the vDSO when the auxiliary vector offers one, against the
// clock_gettime system call and the host's clock (argument 1: the host's
// time in seconds when the test started). One line per check, the same
// natively and on shoal; status 1 if any fails.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

func sysClock(id int) int64 {
	var ts syscall.Timespec
	_, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, uintptr(id), uintptr(unsafe.Pointer(&ts)), 0)
	if e != 0 {
		return -1
	}
	return ts.Nano()
}

var failed bool

func check(what string, ok bool) {
	word := "yes"
	if !ok {
		word = "no"
		failed = true
	}
	fmt.Printf("%s: %s\n", what, word)
}

func main() {
	host, _ := strconv.ParseInt(os.Args[len(os.Args)-1], 10, 64)
	now := time.Now()
	d := now.Unix() - host
	check("time.Now agrees with the host's clock (within 30 s)", host > 0 && d >= -30 && d <= 30)

	ok := true
	for i := 0; i < 100 && ok; i++ {
		a := sysClock(0)
		v := time.Now().UnixNano()
		b := sysClock(0)
		ok = a <= v && v <= b && b-a < 50_000_000
	}
	check("time.Now lies between two clock_gettime(CLOCK_REALTIME) calls", ok)

	start := time.Now()
	mono := true
	var last time.Duration
	for i := 0; i < 200000; i++ {
		s := time.Since(start)
		if s < last {
			mono = false
		}
		last = s
	}
	check("time.Since never goes backwards (200000 reads)", mono)

	t0 := time.Now()
	time.Sleep(50 * time.Millisecond)
	slept := time.Since(t0)
	check("a 50 ms sleep measures 50 ms to 2 s", slept >= 50*time.Millisecond && slept < 2*time.Second)

	fired := make(chan time.Time, 1)
	t1 := time.Now()
	time.AfterFunc(20*time.Millisecond, func() { fired <- time.Now() })
	at := <-fired
	check("a 20 ms timer fires after 20 ms", at.Sub(t1) >= 20*time.Millisecond && at.Sub(t1) < 2*time.Second)

	mA := sysClock(1)
	m := time.Since(start)
	mB := sysClock(1)
	check("the monotonic clock advances with CLOCK_MONOTONIC", m > 0 && mB >= mA && time.Duration(mB-mA) < time.Second)
	if failed {
		os.Exit(1)
	}
}
