package train

import (
	"math"
	"slices"
)

// Metrics are the evaluation results of a classifier.
type Metrics struct {
	Examples int64   `json:"examples"`
	Accuracy float64 `json:"accuracy"`
	LogLoss  float64 `json:"log_loss"`
	// AUC is the area under the ROC curve of P(class 1); binary only.
	AUC float64 `json:"auc,omitempty"`
}

// Evaluate computes the metrics of m on the n rows of x with labels y,
// batch rows at a time.
func Evaluate(m *Linear, x, y []float64, batch int) Metrics {
	n := len(y)
	probs := make([]float64, batch*m.Classes)
	logits := make([]float64, batch*m.Outputs())
	var correct int64
	loss := 0.0
	var scores []float64
	if m.Classes == 2 {
		scores = make([]float64, 0, n)
	}
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		rows := hi - lo
		m.Predict(probs[:rows*m.Classes], logits[:rows*m.Outputs()], x[lo*m.Dim:hi*m.Dim])
		for i := range rows {
			p := probs[i*m.Classes : (i+1)*m.Classes]
			c := int(y[lo+i])
			if argmax(p) == c {
				correct++
			}
			loss -= math.Log(max(p[c], 1e-15))
			if scores != nil {
				scores = append(scores, p[1])
			}
		}
	}
	out := Metrics{Examples: int64(n)}
	if n > 0 {
		out.Accuracy = float64(correct) / float64(n)
		out.LogLoss = loss / float64(n)
	}
	if a := AUC(scores, y); scores != nil && !math.IsNaN(a) {
		out.AUC = a // NaN (one class only) is left out: JSON has no NaN
	}
	return out
}

func argmax(p []float64) int {
	best := 0
	for j, v := range p {
		if v > p[best] {
			best = j
		}
	}
	return best
}

// AUC returns the area under the ROC curve of scores for binary labels
// (1 positive, 0 negative): the probability that a random positive scores
// above a random negative, ties counting one half. It is NaN when either
// class is absent.
func AUC(scores, labels []float64) float64 {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpFloat(scores[a], scores[b]) })
	var pos, neg float64
	rankSum := 0.0 // sum of the (1-based, tie-averaged) ranks of positives
	for i := 0; i < len(idx); {
		j := i
		for j < len(idx) && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2
		for _, k := range idx[i:j] {
			if labels[k] == 1 {
				pos++
				rankSum += avg
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - pos*(pos+1)/2) / (pos * neg)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
