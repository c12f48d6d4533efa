// forkexec starts a process three ways (os/exec, os.StartProcess,
// syscall.Exec) and prints what each gives: in a shoal instance, which is
// one process, each is an error (ENOSYS), and the program goes on.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	err := exec.Command("/bin/true").Run()
	fmt.Println("os/exec:", err)
	_, err = os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	fmt.Println("StartProcess:", err)
	err = syscall.Exec("/bin/true", []string{"true"}, nil)
	fmt.Println("syscall.Exec:", err)
	fmt.Println("still running")
}
