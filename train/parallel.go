package train

import (
	"runtime"
	"sync"
)

// parter is work split into numbered parts that may run concurrently.
type parter interface {
	part(i int)
}

// partTask is part i of p, for a worker of partPool, which marks it done
// on wg.
type partTask struct {
	p  parter
	i  int
	wg *sync.WaitGroup
}

// partPool is the process's goroutines for the parts of a training step
// (one fewer than the CPUs), started on first use and parked on tasks
// when idle, as train/internal/kernel's GEMM pool is; the two pools are
// apart, so a part's own products never wait on a worker busy with a
// part.
var partPool struct {
	once  sync.Once
	tasks chan partTask
}

func startPartPool() {
	partPool.tasks = make(chan partTask) // unbuffered: a send finds an idle worker or fails
	for range min(runtime.NumCPU()-1, 64) {
		go func() {
			for t := range partPool.tasks {
				t.p.part(t.i)
				t.wg.Done()
			}
		}()
	}
}

// runParts runs p.part(i) for i in [0, n) and returns when all are done:
// part 0 and any part that finds no idle worker on the calling goroutine,
// the others on idle workers, at most GOMAXPROCS at a time. wg is scratch
// owned by the caller (so that a call allocates nothing). Which goroutine
// runs a part must not change its result.
func runParts(p parter, n int, wg *sync.WaitGroup) {
	procs := runtime.GOMAXPROCS(0)
	if n <= 1 || procs <= 1 {
		for i := range n {
			p.part(i)
		}
		return
	}
	partPool.once.Do(startPartPool)
	handed := 0 // parts 1…handed run on workers
	for handed+1 < n && handed+1 < procs {
		wg.Add(1)
		select {
		case partPool.tasks <- partTask{p, handed + 1, wg}:
			handed++
			continue
		default:
			wg.Done()
		}
		break
	}
	p.part(0)
	for i := handed + 1; i < n; i++ {
		p.part(i)
	}
	wg.Wait()
}
