package train

import "math"

// The losses below take the logits z of n rows and their targets y, write
// ∂L/∂z into dz (same shape as z; it may alias z) and return the mean loss
// L over the rows. dz is already divided by n, so it is the gradient of
// the mean.

// logisticLoss is the binary log loss of one logit per row, y ∈ {0, 1}:
//
//	L = -[y log σ(z) + (1-y) log(1-σ(z))],  ∂L/∂z = σ(z) - y
//
// An infinite logit makes L +Inf: the weights have overflowed, which the
// clamp inside logLoss would otherwise hide (with FMA kernels an
// overflowing dot product saturates to ±Inf rather than turning NaN).
func logisticLoss(dz, z, y []float64) float64 {
	n := float64(len(y))
	loss := 0.0
	for i, t := range y {
		p := sigmoid(z[i])
		loss += logLoss(p, int(t))
		if math.IsInf(z[i], 0) {
			loss = math.Inf(1)
		}
		dz[i] = (p - t) / n
	}
	return loss / n
}

// softmaxCrossEntropy is the cross-entropy of softmax(z) against class
// index y, with len(z)/len(y) classes; p is scratch of one row:
//
//	L = -log p_y,  p = softmax(z),  ∂L/∂z_j = p_j - [j = y]
func softmaxCrossEntropy(dz, z, y, p []float64) float64 {
	n := len(y)
	k := len(z) / n
	p = p[:k]
	loss := 0.0
	for i, t := range y {
		probabilities(p, z[i*k:(i+1)*k])
		c := int(t)
		loss -= math.Log(max(p[c], 1e-15))
		d := dz[i*k : (i+1)*k]
		for j, v := range p {
			d[j] = v / float64(n)
		}
		d[c] -= 1 / float64(n)
	}
	return loss / float64(n)
}

// squaredError is the squared error of one prediction per row:
//
//	L = (z - y)²,  ∂L/∂z = 2(z - y)
func squaredError(dz, z, y []float64) float64 {
	n := float64(len(y))
	loss := 0.0
	for i, t := range y {
		e := z[i] - t
		loss += e * e
		dz[i] = 2 * e / n
	}
	return loss / n
}
