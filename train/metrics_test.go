package train

import (
	"math"
	"testing"
)

// TestStreamKnownValues feeds hand-made predictions in batches of every
// size and checks each metric against values worked out by hand.
func TestStreamKnownValues(t *testing.T) {
	// Binary: P(class 1) and labels. Predicted (p > 0.5): 1 0 1 0 1 0.
	// tp = 2 (rows 0, 2), fp = 1 (row 4), fn = 1 (row 3), tn = 2.
	// AUC: positives {0.9, 0.7, 0.4}, negatives {0.2, 0.6, 0.1}:
	// pairs won 3 + 3 + 2 = 8 of 9.
	p1 := []float64{0.9, 0.2, 0.7, 0.4, 0.6, 0.1}
	y := []float64{1, 0, 1, 1, 0, 0}
	probs := make([]float64, 0, 12)
	logLoss := 0.0
	for i, p := range p1 {
		probs = append(probs, 1-p, p)
		if y[i] == 1 {
			logLoss -= math.Log(p)
		} else {
			logLoss -= math.Log(1 - p)
		}
	}
	want := Metrics{Examples: 6, Accuracy: 4.0 / 6, LogLoss: logLoss / 6, AUC: 8.0 / 9, Precision: 2.0 / 3, Recall: 2.0 / 3}
	if exact := AUC(p1, y); math.Abs(exact-want.AUC) > 1e-15 {
		t.Fatalf("exact AUC %v, want %v", exact, want.AUC)
	}
	for batch := 1; batch <= 6; batch++ {
		s := NewStream(2)
		for lo := 0; lo < 6; lo += batch {
			hi := min(lo+batch, 6)
			s.AddProbabilities(probs[2*lo:2*hi], y[lo:hi])
		}
		if got := s.Metrics(); !nearly(got, want) {
			t.Errorf("binary, batches of %d: got %+v, want %+v", batch, got, want)
		}
	}

	// Regression: errors 1, -2, 0.5, 0 → MSE (1+4+0.25)/4, MAE 3.5/4.
	s := NewStream(0)
	s.AddPredictions([]float64{2, 0}, []float64{1, 2})
	s.AddPredictions([]float64{1.5, 7}, []float64{1, 7})
	if got, want := s.Metrics(), (Metrics{Examples: 4, RMSE: math.Sqrt(5.25 / 4), MAE: 3.5 / 4}); !nearly(got, want) {
		t.Errorf("regression: got %+v, want %+v", got, want)
	}

	// Three classes: argmax 0, 2, 2 against 0, 1, 2.
	s = NewStream(3)
	s.AddProbabilities([]float64{0.5, 0.3, 0.2, 0.1, 0.4, 0.5, 0, 0.2, 0.8}, []float64{0, 1, 2})
	if got, want := s.Metrics(), (Metrics{Examples: 3, Accuracy: 2.0 / 3, LogLoss: -(math.Log(0.5) + math.Log(0.4) + math.Log(0.8)) / 3}); !nearly(got, want) {
		t.Errorf("multiclass: got %+v, want %+v", got, want)
	}

	// AUC edge cases agree with the exact AUC: ties count one half, a
	// single class leaves AUC out.
	s = NewStream(2)
	s.AddProbabilities([]float64{0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, []float64{0, 1, 0, 1})
	if got := s.Metrics().AUC; got != 0.5 {
		t.Errorf("AUC of ties: got %v, want 0.5", got)
	}
	s = NewStream(2)
	s.AddProbabilities([]float64{0.2, 0.8}, []float64{1})
	if got := s.Metrics(); got.AUC != 0 || got.Precision != 1 || got.Recall != 1 {
		t.Errorf("one class: got %+v, want AUC 0 (left out), precision and recall 1", got)
	}
	if got := NewStream(2).Metrics(); got != (Metrics{}) {
		t.Errorf("empty: got %+v, want zero", got)
	}
}

func nearly(a, b Metrics) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) <= 1e-12 }
	return a.Examples == b.Examples && eq(a.Accuracy, b.Accuracy) && eq(a.LogLoss, b.LogLoss) && eq(a.AUC, b.AUC) &&
		eq(a.Precision, b.Precision) && eq(a.Recall, b.Recall) && eq(a.RMSE, b.RMSE) && eq(a.MAE, b.MAE)
}
