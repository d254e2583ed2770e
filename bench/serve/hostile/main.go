// Command hostile measures a running prediction server under the attack
// bodies of issue 13: -clients concurrent clients each send -requests
// bodies of 1.3 MB, alternating a V2 tensor of shape [650000] and a
// :predict body of 433,000 empty instances, while the server process's
// resident set (VmRSS of /proc/PID/status) is sampled every 5 ms. It
// prints the RSS before and at its peak, the answers' status codes and the
// time taken. Run it through hostile.sh, which starts the servers.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "", "server base URL, e.g. http://127.0.0.1:28080 (required)")
	pid := flag.Int("pid", 0, "server process ID, for its RSS (required)")
	clients := flag.Int("clients", 4, "concurrent clients")
	requests := flag.Int("requests", 50, "requests per client")
	flag.Parse()
	if *url == "" || *pid == 0 {
		fmt.Fprintln(os.Stderr, "usage: hostile --url URL --pid PID")
		os.Exit(2)
	}
	if err := run(*url, *pid, *clients, *requests); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(url string, pid, clients, requests int) error {
	data := strings.Repeat("0,", 650_000)
	insts := strings.Repeat("{},", 433_000)
	bodies := [][]byte{
		[]byte(`{"inputs":[{"name":"age","shape":[650000],"datatype":"FP64","data":[` + data[:len(data)-1] + `]}]}`),
		[]byte(`{"instances":[` + insts[:len(insts)-1] + `]}`),
	}
	paths := []string{"/v2/models/census/infer", "/v1/models/census:predict"}
	base, err := rss(pid)
	if err != nil {
		return err
	}
	stop, sampled := make(chan struct{}), make(chan struct{})
	peak := base
	go func() {
		defer close(sampled)
		for {
			if r, err := rss(pid); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var mu sync.Mutex
	codes := map[int]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c := &http.Client{Timeout: 5 * time.Minute}
			for j := range requests {
				k := (i + j) % 2
				code := -1
				res, err := c.Post(url+paths[k], "application/json", bytes.NewReader(bodies[k]))
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					code = res.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	<-sampled
	fmt.Printf("%d clients x %d requests of %.1f MB in %.1f s: status codes %v; server RSS %d MB before, peak %d MB\n",
		clients, requests, float64(len(bodies[0]))/1e6, elapsed.Seconds(), codes, base>>20, peak>>20)
	return nil
}

// rss returns the resident set size of process pid in bytes.
func rss(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
