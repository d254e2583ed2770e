// Command serve measures the prediction server: requests/s and latency of
// the Echo server (all middleware: request IDs, logging, metrics, gzip)
// against a bare net/http handler doing the same Transform + predict, in
// one process, with the same load generator; the allocations of one request
// on each path; p50 and p99 of both at half the Echo server's peak rate;
// and non-2xx answers while new versions are hot-reloaded. The clients
// accept gzip, as Go clients do by default, so the Echo server compresses
// answers of 1,400 bytes or more (32 instances); the bare handler never
// compresses. The "echo gzip" rows also send gzip-compressed requests. Run
// it through run.sh, which trains the model.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/trainflow/trainflow/bundle"
	"github.com/trainflow/trainflow/rollout"
	"github.com/trainflow/trainflow/serving"
)

func main() {
	models := flag.String("models", "", "model repository holding model census (required)")
	duration := flag.Duration("duration", 5*time.Second, "length of each load run")
	conc := flag.Int("concurrency", 4, "concurrent clients")
	reload := flag.Duration("reload", 20*time.Second, "length of the hot-reload run (0 skips it)")
	rounds := flag.Int("rounds", 5, "interleaved rounds per server and batch size, sharing -duration")
	shadow := flag.Bool("shadow", false, "measure only what a shadow version adds to latency (model census needs two versions)")
	shadowPercent := flag.Int("shadow-percent", 0, "with -shadow: the routing's shadow_percent (0: every request)")
	shadowMaxLive := flag.Int("shadow-max-live", 0, "with -shadow: the server's ShadowMaxLive (0: its default, GOMAXPROCS)")
	flag.Parse()
	if *models == "" {
		fmt.Fprintln(os.Stderr, "usage: serve --models DIR")
		os.Exit(2)
	}
	if *shadow {
		if err := runShadow(*models, *duration, *conc, *rounds, *shadowPercent, *shadowMaxLive); err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*models, *duration, *conc, *rounds, *reload); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

const model = "census"

var instance = map[string]any{"age": 39, "workclass": "State-gov", "education": "Bachelors", "education_num": 13,
	"marital_status": "Married-civ-spouse", "occupation": "Exec-managerial", "relationship": "Husband", "race": "White",
	"gender": "Male", "capital_gain": 2174, "capital_loss": 0, "hours_per_week": 45, "native_country": "United-States"}

func body(n int) []byte {
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = instance
	}
	b, _ := json.Marshal(map[string]any{"instances": rows})
	return b
}

// bare is the baseline: decode, Transform + predict, encode, nothing else.
func bare(reg *serving.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sv, err := reg.Get(model, 0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var req struct {
			Instances []map[string]json.RawMessage `json:"instances"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		preds, err := sv.Predict(req.Instances)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"predictions": preds})
	})
}

// result of one load run.
type result struct {
	rps      float64
	p50, p99 time.Duration
	lat      []time.Duration // sorted
	non2xx   int64
}

// gzipped returns b gzip-compressed.
func gzipped(b []byte) []byte {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	return z.Bytes()
}

// load drives url with conc closed-loop clients for d, or, if rate > 0,
// with requests paced at rate per second (open loop), and reports. A
// non-empty encoding is sent as the payload's Content-Encoding.
func load(url string, payload []byte, encoding string, conc int, d time.Duration, rate float64, during func(stop <-chan struct{})) result {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2}}
	var mu sync.Mutex
	var lat []time.Duration
	var non2xx, n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				if tick != nil {
					select {
					case <-tick:
					case <-stop:
						mu.Lock()
						lat = append(lat, mine...)
						mu.Unlock()
						return
					}
				}
				select {
				case <-stop:
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
					return
				default:
				}
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
				req.Header.Set("Content-Type", "application/json")
				if encoding != "" {
					req.Header.Set("Content-Encoding", encoding)
				}
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode/100 != 2 {
					non2xx.Add(1)
				}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				mine = append(mine, time.Since(t0))
				n.Add(1)
			}
		}()
	}
	if during != nil {
		go during(stop)
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	return result{rps: float64(n.Load()) / time.Since(start).Seconds(), p50: percentile(lat, 0.50), p99: percentile(lat, 0.99), non2xx: non2xx.Load(), lat: lat}
}

// percentile returns the p-quantile of sorted latencies.
func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	return lat[min(len(lat)-1, int(p*float64(len(lat))))]
}

// allocs reports allocations per request of h, in process.
func allocs(h http.Handler, path string, payload []byte, encoding string) float64 {
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(payload))
			r.Header.Set("Content-Type", "application/json")
			if encoding != "" {
				r.Header.Set("Content-Encoding", encoding)
				r.Header.Set("Accept-Encoding", encoding)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
	})
	return float64(res.MemAllocs) / float64(res.N)
}

func listen(h http.Handler) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Shutdown(context.Background()) }
}

func run(models string, d time.Duration, conc, rounds int, reloadFor time.Duration) error {
	repo, err := bundle.OpenRepository(context.Background(), models)
	if err != nil {
		return err
	}
	defer repo.Close()
	reg := serving.NewRegistry(repo, nil, slog.New(slog.DiscardHandler))
	if err := reg.Reload(); err != nil {
		return err
	}
	if _, err := reg.Get(model, 0); err != nil {
		return err
	}
	echoSrv := serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{})
	echoURL, stopEcho := listen(echoSrv)
	defer stopEcho()
	bareURL, stopBare := listen(bare(reg))
	defer stopBare()

	fmt.Printf("bench/serve: %d clients, %s per run, GOMAXPROCS %s\n\n", conc, d, os.Getenv("GOMAXPROCS"))
	fmt.Printf("%-9s %-6s %10s %10s %10s %12s\n", "server", "batch", "req/s", "p50", "p99", "allocs/req")
	// Each server gets rounds alternating with the others', so a change in
	// the machine's load hits all; medians are reported.
	peak := map[int]float64{}
	for _, batch := range []int{1, 32} {
		payload := body(batch)
		servers := []struct {
			name, url, path string
			h               http.Handler
			payload         []byte
			encoding        string
		}{
			{"echo", echoURL + "/v1/models/census:predict", "/v1/models/census:predict", echoSrv, payload, ""},
			{"net/http", bareURL + "/", "/", bare(reg), payload, ""},
			{"echo gzip", echoURL + "/v1/models/census:predict", "/v1/models/census:predict", echoSrv, gzipped(payload), "gzip"},
		}
		runs := make([][]result, len(servers))
		for range rounds {
			for i, s := range servers {
				runs[i] = append(runs[i], load(s.url, s.payload, s.encoding, conc, d/time.Duration(rounds), 0, nil))
			}
		}
		var rps [3]float64
		for i, s := range servers {
			m := median(runs[i])
			rps[i] = m.rps
			fmt.Printf("%-9s %-6d %10.0f %10s %10s %12.0f\n", s.name, batch, m.rps, m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), allocs(s.h, s.path, s.payload, s.encoding))
		}
		peak[batch] = rps[0]
		fmt.Printf("%-9s %-6d %10.2f   (echo req/s ÷ net/http req/s, medians of %d interleaved rounds)\n\n", "ratio", batch, rps[0]/rps[1], rounds)
	}
	// Latency at half the Echo server's peak rate, offered to both servers
	// in interleaved rounds; percentiles over all rounds' requests.
	var halfLat [2][]time.Duration
	for range rounds {
		for i, url := range []string{echoURL + "/v1/models/census:predict", bareURL + "/"} {
			halfLat[i] = append(halfLat[i], load(url, body(1), "", conc, d/time.Duration(rounds), peak[1]/2, nil).lat...)
		}
	}
	for i, name := range []string{"echo", "net/http"} {
		slices.Sort(halfLat[i])
		fmt.Printf("%s at 50%% of echo's peak (%.0f req/s offered): p50 %s, p99 %s\n", name, peak[1]/2,
			percentile(halfLat[i], 0.50).Round(time.Microsecond), percentile(halfLat[i], 0.99).Round(time.Microsecond))
	}

	if reloadFor <= 0 {
		return nil
	}
	// Hot reload under load: publish copies of the newest version as new
	// versions and reload, every 500 ms; nothing may fail.
	vs, _ := repo.Versions(context.Background(), model)
	src, _ := repo.Dir(model, vs[len(vs)-1])
	reloads := 0
	r := load(echoURL+"/v1/models/census:predict", body(1), "", conc, reloadFor, 0, func(stop <-chan struct{}) {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := republish(repo, src, reloads); err != nil {
					fmt.Fprintln(os.Stderr, "republish:", err)
					return
				}
				reg.Reload()
				reloads++
			}
		}
	})
	fmt.Printf("hot reload: %d new versions loaded during %s at %.0f req/s: %d non-2xx answers\n", reloads, reloadFor, r.rps, r.non2xx)
	if r.non2xx != 0 {
		return fmt.Errorf("%d requests failed during hot reload", r.non2xx)
	}
	return nil
}

// republish copies a version directory as a new version with a distinct
// source, the way Publish lays it out, and promotes it.
func republish(repo *bundle.Store, src string, i int) error {
	vs, err := repo.Versions(context.Background(), model)
	if err != nil {
		return err
	}
	next := vs[len(vs)-1] + 1
	root, _ := repo.LocalDir()
	tmp, err := os.MkdirTemp(filepath.Join(root, model), ".tmp-bench-")
	if err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if e.Name() == bundle.SourceFile {
			b = []byte(`{"job_id":"bench","bundle":"copy ` + strconv.Itoa(i) + `","hash":"` + strconv.Itoa(i) + `"}`)
		}
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	dst, _ := repo.Dir(model, next)
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, model, bundle.DefaultFile), []byte(strconv.FormatInt(next, 10)+"\n"), 0o644)
}

// median returns the run with the median throughput.
func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.rps < b.rps:
			return -1
		case a.rps > b.rps:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// runShadow measures the latency a shadow version adds: the Echo server
// at half its peak rate (measured first, without routing), in interleaved
// rounds of four: without routing; with the default answering 100% and
// another version shadowing it, on the server as configured
// (ShadowMaxLive maxLive, 0: its default); the same on a second server
// whose copies start whatever the live predictions in flight
// (ShadowMaxLive 1<<20; its worker still rests between copies); and
// without routing on the second server, whose difference from the first
// round is the noise. Odd rounds run the four in reverse order, so that
// no configuration gains from its place in a round. It prints
// percentiles over all rounds' requests, the median over rounds of each round's p99 ratio to the first's (each
// round's four loads are seconds apart, so a change in the machine's
// other load mostly hits all four), and the share of the copies each
// shadow version answered (the others were dropped,
// trainflow_serving_shadow_dropped_total). Each server has its own
// registry, so its own shadow counters. The routing is written with
// SetRouting, as `trainflow models route` does.
func runShadow(models string, d time.Duration, conc, rounds, percent, maxLive int) error {
	ctx := context.Background()
	repo, err := bundle.OpenRepository(ctx, models)
	if err != nil {
		return err
	}
	defer repo.Close()
	vs, err := repo.Versions(ctx, model)
	if err != nil {
		return err
	}
	def, err := repo.Default(ctx, model)
	if err != nil || len(vs) < 2 {
		return fmt.Errorf("model census needs two versions, has %v (%v)", vs, err)
	}
	other := vs[0]
	if other == def {
		other = vs[1]
	}
	type server struct {
		reg       *serving.Registry
		base, url string
	}
	var srvs [2]server
	for i, ml := range []int{maxLive, 1 << 20} {
		reg := serving.NewRegistry(repo, nil, slog.New(slog.DiscardHandler))
		srv := serving.New(reg, slog.New(slog.DiscardHandler), serving.Options{ShadowMaxLive: ml})
		defer srv.Close()
		base, stop := listen(srv)
		defer stop()
		srvs[i] = server{reg: reg, base: base, url: base + "/v1/models/census:predict"}
	}
	set := func(rt rollout.Routing) error {
		if _, err := repo.SetRouting(ctx, model, rt, bundle.Cause{By: "bench"}, time.Now()); err != nil {
			return err
		}
		for _, s := range srvs {
			if err := s.reg.Reload(); err != nil {
				return err
			}
		}
		return nil
	}
	none, shadow := rollout.Routing{}, rollout.Routing{Weights: []rollout.Weight{{Version: def, Percent: 100}}, Shadow: other, ShadowPercent: percent}
	defer set(none)
	if err := set(none); err != nil {
		return err
	}
	peak := load(srvs[0].url, body(1), "", conc, d/time.Duration(rounds), 0, nil).rps
	var lat [4][]time.Duration
	var ratios [3][]float64 // per round: p99 with shadow (each server), and without on server 2 (the noise), / p99 without on server 1
	var non2xx int64
	order := [4]rollout.Routing{none, shadow, shadow, none}
	for round := range rounds {
		var p99 [4]time.Duration
		for k := range order {
			i := k // odd rounds run the four loads in reverse (ABBA), so none gains from its place
			if round%2 == 1 {
				i = len(order) - 1 - k
			}
			if err := set(order[i]); err != nil {
				return err
			}
			r := load(srvs[min(i, 2)/2].url, body(1), "", conc, d/time.Duration(rounds), peak/2, nil)
			lat[i] = append(lat[i], r.lat...)
			non2xx += r.non2xx
			l := slices.Clone(r.lat)
			slices.Sort(l)
			p99[i] = percentile(l, 0.99)
		}
		for i := range ratios {
			ratios[i] = append(ratios[i], float64(p99[i+1])/float64(p99[0]))
		}
	}
	fmt.Printf("bench/serve --shadow: %d clients, %.0f req/s offered (half of %.0f), %d interleaved rounds of %s each, GOMAXPROCS %s\n",
		conc, peak/2, peak, rounds, d/time.Duration(rounds), os.Getenv("GOMAXPROCS"))
	var p99 [4]time.Duration
	for i, name := range []string{"no routing", shadow.String(), shadow.String() + ", every copy started", "no routing (server 2)"} {
		slices.Sort(lat[i])
		p99[i] = percentile(lat[i], 0.99)
		fmt.Printf("%-36s p50 %s, p99 %s over %d requests\n", name, percentile(lat[i], 0.50).Round(time.Microsecond), p99[i].Round(time.Microsecond), len(lat[i]))
	}
	fmt.Printf("p99 with shadow / without, over all rounds: %.3f (every copy started: %.3f); non-2xx: %d\n", float64(p99[1])/float64(p99[0]), float64(p99[2])/float64(p99[0]), non2xx)
	for i := range ratios {
		slices.Sort(ratios[i])
	}
	fmt.Printf("p99 with shadow / without in the same round, median of %d rounds: %.3f (every copy started: %.3f; no routing on server 2, the noise: %.3f)\n",
		rounds, ratios[0][rounds/2], ratios[1][rounds/2], ratios[2][rounds/2])
	for i, name := range []string{"with shadow", "every copy started", "no routing on server 2 (the noise)"} {
		m, lo, hi := geoMeanCI(ratios[i])
		fmt.Printf("p99 / p99 without in the same round, geometric mean of %d rounds (95%% CI): %s %.3f [%.3f, %.3f]\n", rounds, name, m, lo, hi)
	}
	for i, s := range srvs {
		sh := s.reg.Telemetry("bench", model, time.Now()).Versions[bundle.VersionKey(other)].Shadow
		fmt.Printf("server %d: copies answered by the shadow version: %d of %d shadowed requests (%.1f%%), each in ≤ %.3g ms (p50), ≤ %.3g ms (p99); %s\n",
			i+1, sh.Requests, len(lat[i+1]), 100*float64(sh.Requests)/float64(max(len(lat[i+1]), 1)), sh.Quantile(0.5), sh.Quantile(0.99), droppedLines(s.base))
	}
	return nil
}

// droppedLines returns the server's trainflow_serving_shadow_dropped_total
// series from its /metrics, on one line.
func droppedLines(base string) string {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "trainflow_serving_shadow_dropped_total") {
			out = append(out, l)
		}
	}
	return strings.Join(out, ", ")
}

// geoMeanCI returns the geometric mean of the ratios and its 95%
// confidence interval, from the mean and standard error of their logs
// (Student's t with n−1 degrees of freedom).
func geoMeanCI(ratios []float64) (mean, lo, hi float64) {
	logs := make([]float64, len(ratios))
	for i, r := range ratios {
		logs[i] = math.Log(r)
	}
	m, sd := stat.MeanStdDev(logs, nil)
	if len(logs) < 2 {
		return math.Exp(m), math.NaN(), math.NaN()
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(logs) - 1)}.Quantile(0.975)
	h := t * sd / math.Sqrt(float64(len(logs)))
	return math.Exp(m), math.Exp(m - h), math.Exp(m + h)
}
