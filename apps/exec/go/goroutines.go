// goroutines: a static Go program (CGO_ENABLED=0, built by the tests)
// using goroutines, channels, a mutex, a WaitGroup, timers, a ticker,
// JSON and the environment; exits 3.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"
)

type item struct {
	ID     int    `json:"id"`
	Name   string `json:"name"`
	Square int    `json:"square"`
}

func main() {
	ch := make(chan item)
	var wg sync.WaitGroup
	var mu sync.Mutex
	count := 0
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < 200; i += 8 {
				mu.Lock()
				count++
				mu.Unlock()
				ch <- item{ID: i, Name: fmt.Sprintf("n%d", i), Square: i * i}
			}
		}(w)
	}
	go func() { wg.Wait(); close(ch) }()
	var items []item
	for it := range ch {
		items = append(items, it)
	}
	sort.Slice(items, func(a, b int) bool { return items[a].ID < items[b].ID })
	b, err := json.Marshal(items[:3])
	fmt.Println(string(b), err, len(items), count)
	start := time.Now()
	<-time.NewTimer(20 * time.Millisecond).C
	tick := time.NewTicker(5 * time.Millisecond)
	for i := 0; i < 3; i++ {
		<-tick.C
	}
	tick.Stop()
	fmt.Println("timers waited:", time.Since(start) >= 35*time.Millisecond)
	fmt.Println("args:", os.Args[1:], "GREETING:", os.Getenv("GREETING"))
	os.Exit(3)
}
