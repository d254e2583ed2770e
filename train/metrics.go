package train

import (
	"math"
	"slices"
)

// Metrics are the evaluation results of a model. Classifiers fill
// Accuracy and LogLoss, binary ones also AUC, Precision and Recall (class 1
// positive); regressors fill RMSE and MAE.
type Metrics struct {
	Examples int64   `json:"examples"`
	Accuracy float64 `json:"accuracy"`
	LogLoss  float64 `json:"log_loss"`
	// AUC is the area under the ROC curve of P(class 1); binary only.
	AUC       float64 `json:"auc,omitempty"`
	Precision float64 `json:"precision,omitempty"`
	Recall    float64 `json:"recall,omitempty"`
	RMSE      float64 `json:"rmse,omitempty"`
	MAE       float64 `json:"mae,omitempty"`
}

// Evaluate computes the metrics of m on the rows of x with targets y,
// batch rows at a time, through a Stream.
func Evaluate(m Model, x, y []float64, batch int) Metrics {
	n, dim, classes, k := len(y), m.InputDim(), m.NumClasses(), m.Outputs()
	probs := make([]float64, batch*classes)
	logits := make([]float64, batch*k)
	s := NewStream(classes)
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		rows := hi - lo
		m.Predict(probs[:rows*classes], logits[:rows*k], x[lo*dim:hi*dim])
		if classes == 0 {
			s.AddPredictions(logits[:rows], y[lo:hi])
		} else {
			s.AddProbabilities(probs[:rows*classes], y[lo:hi])
		}
	}
	return s.Metrics()
}

// AUCBins is the number of equal-width score bins of a Stream's AUC on
// [0, 1]. Two scores in one bin count as a tie (one half), so the AUC of a
// Stream is exact when no positive shares a bin with a negative, and off
// by at most the fraction of such pairs otherwise.
const AUCBins = 1 << 14

// Stream accumulates metrics over batches in constant memory: counts and
// sums, plus for binary classifiers a histogram of P(class 1) per label
// for the AUC. The zero Stream is not usable; call NewStream. Not safe for
// concurrent use.
type Stream struct {
	classes          int
	n, correct       int64
	logLoss, se, ae  float64
	tp, fp, fn       int64
	posBins, negBins []int64
}

// NewStream returns an empty Stream for a model with classes classes (0
// for a regressor).
func NewStream(classes int) *Stream {
	s := &Stream{classes: classes}
	if classes == 2 {
		s.posBins, s.negBins = make([]int64, AUCBins), make([]int64, AUCBins)
	}
	return s
}

// AddProbabilities adds the rows of probs (classes per row) with their
// class indices y. The predicted class is the most probable one, the first
// on ties.
func (s *Stream) AddProbabilities(probs, y []float64) {
	for i, t := range y {
		p := probs[i*s.classes : (i+1)*s.classes]
		c, pred := int(t), Argmax(p)
		s.n++
		if pred == c {
			s.correct++
		}
		s.logLoss -= math.Log(max(p[c], 1e-15))
		if s.classes != 2 {
			continue
		}
		switch {
		case pred == 1 && c == 1:
			s.tp++
		case pred == 1:
			s.fp++
		case c == 1:
			s.fn++
		}
		b := min(max(int(p[1]*AUCBins), 0), AUCBins-1)
		if c == 1 {
			s.posBins[b]++
		} else {
			s.negBins[b]++
		}
	}
}

// AddPredictions adds a regressor's predictions with their targets y.
func (s *Stream) AddPredictions(pred, y []float64) {
	for i, t := range y {
		e := pred[i] - t
		s.n++
		s.se += e * e
		s.ae += math.Abs(e)
	}
}

// Metrics returns the metrics of everything added so far. AUC is left at
// zero when a class is absent (it is undefined and JSON has no NaN), and
// so are precision and recall when undefined.
func (s *Stream) Metrics() Metrics {
	out := Metrics{Examples: s.n}
	if s.n == 0 {
		return out
	}
	n := float64(s.n)
	if s.classes == 0 {
		out.RMSE, out.MAE = math.Sqrt(s.se/n), s.ae/n
		return out
	}
	out.Accuracy, out.LogLoss = float64(s.correct)/n, s.logLoss/n
	if s.classes != 2 {
		return out
	}
	if s.tp+s.fp > 0 {
		out.Precision = float64(s.tp) / float64(s.tp+s.fp)
	}
	if s.tp+s.fn > 0 {
		out.Recall = float64(s.tp) / float64(s.tp+s.fn)
	}
	var pos, neg, negBelow, area float64
	for b := range s.posBins {
		p, q := float64(s.posBins[b]), float64(s.negBins[b])
		area += p * (negBelow + q/2)
		negBelow += q
		pos += p
		neg += q
	}
	if pos > 0 && neg > 0 {
		out.AUC = area / (pos * neg)
	}
	return out
}

// Argmax returns the index of the largest value of p (the first of
// equal ones): the predicted class of a probability vector, for the
// evaluator and the prediction server alike.
func Argmax(p []float64) int {
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
