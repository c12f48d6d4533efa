// A recovered nil-pointer panic (a SIGSEGV the Go runtime turns into a
// panic through its signal handler), a nil map write and a division by
// zero, each recovered with defer/recover; the program goes on.
package main

import (
	"fmt"
	"os"
)

type node struct {
	val  int
	next *node
}

func deref(n *node) (v int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("recovered: %v", r)
		}
	}()
	return n.next.val, nil
}

func main() {
	for i := 0; i < 3; i++ {
		v, err := deref(&node{val: i})
		fmt.Println(i, v, err)
	}
	v, err := deref(&node{next: &node{val: 7}})
	fmt.Println("ok", v, err)
	var m map[string]int
	func() {
		defer func() { fmt.Println("map:", recover()) }()
		m["x"] = 1
	}()
	func() {
		defer func() { fmt.Println("div:", recover()) }()
		a, b := 1, 0
		fmt.Println(a / b)
	}()
	fmt.Fprintln(os.Stderr, "done")
}
