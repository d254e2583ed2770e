// Command tuning measures trainflow's hyperparameter search on standard
// test functions, run as trials through the same suggestion code the
// SuggestTrials activity calls (no training): for each function, search
// and seed, the number of trials until the best value is within 1% of the
// known optimum (budget+1 if never), as JSON lines. run.sh adds Optuna's
// TPE sampler on the same functions and prints medians.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/trainflow/trainflow/tuning"
)

// problem is a function to minimise over a box, with its known minimum.
type problem struct {
	name  string
	space tuning.Space
	f     func([]float64) float64
	min   float64
}

func branin(x []float64) float64 {
	b, c, t := 5.1/(4*math.Pi*math.Pi), 5/math.Pi, 1/(8*math.Pi)
	return math.Pow(x[1]-b*x[0]*x[0]+c*x[0]-6, 2) + 10*(1-t)*math.Cos(x[0]) + 10
}

// hartmann6 is the 6-D Hartmann function on [0,1]^6; minimum −3.32237.
func hartmann6(x []float64) float64 {
	alpha := []float64{1.0, 1.2, 3.0, 3.2}
	a := [4][6]float64{{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14}, {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}}
	p := [4][6]float64{{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
		{2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}}
	s := 0.0
	for i := range 4 {
		e := 0.0
		for j := range 6 {
			d := x[j] - p[i][j]*1e-4
			e += a[i][j] * d * d
		}
		s += alpha[i] * math.Exp(-e)
	}
	return -s
}

func unitBox(n int) tuning.Space {
	s := make(tuning.Space, n)
	for i := range s {
		s[i] = tuning.Param{Name: fmt.Sprintf("x%d", i), Kind: tuning.Double, Min: 0, Max: 1}
	}
	return s
}

var problems = []problem{
	{"branin", tuning.Space{{Name: "x1", Kind: tuning.Double, Min: -5, Max: 10}, {Name: "x2", Kind: tuning.Double, Min: 0, Max: 15}}, branin, 0.397887},
	{"hartmann6", unitBox(6), hartmann6, -3.32237},
}

type row struct {
	Problem string  `json:"problem"`
	Search  string  `json:"search"`
	Seed    uint64  `json:"seed"`
	Trials  int     `json:"trials_to_1pct"`
	Best    float64 `json:"best"`
	Secs    float64 `json:"secs"`
}

func main() {
	seeds := flag.Int("seeds", 10, "seeds per search")
	budget := flag.Int("budget", 100, "trials per run")
	only := flag.String("problems", "branin,hartmann6", "comma-separated problems")
	searches := flag.String("searches", "bayesian,random", "comma-separated searches")
	flag.Parse()
	enc := json.NewEncoder(os.Stdout)
	for _, p := range problems {
		if !strings.Contains(*only, p.name) {
			continue
		}
		for _, name := range strings.Split(*searches, ",") {
			alg := map[string]tuning.Algorithm{"bayesian": tuning.Bayesian, "random": tuning.Random}[name]
			for seed := range uint64(*seeds) {
				start := time.Now()
				r := row{Problem: p.name, Search: name, Seed: seed, Trials: *budget + 1, Best: math.Inf(1)}
				var obs []tuning.Observation
				for len(obs) < *budget {
					pts, err := tuning.Suggest(tuning.Request{Space: p.space, Algorithm: alg, Observed: obs, N: 1, Seed: seed + 1})
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					y := p.f(pts[0])
					obs = append(obs, tuning.Observation{X: pts[0], Y: y})
					r.Best = min(r.Best, y)
					if r.Trials > *budget && r.Best-p.min <= 0.01*math.Abs(p.min) {
						r.Trials = len(obs)
						break
					}
				}
				r.Secs = time.Since(start).Seconds()
				enc.Encode(r)
			}
		}
	}
}
