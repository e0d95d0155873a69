package fraud

import (
	"math"
	"math/rand/v2"
)

// logisticRegression is v24's model over the one-hot encoded features:
// p = sigmoid(w·x + b), with the weights on raw (unscaled) feature values.
type logisticRegression struct {
	w []float32
	b float32
}

// trainLogistic fits a class-balanced logistic regression by full-batch
// gradient descent on standardised features, then folds the
// standardisation into the weights so the model reads raw features.
func trainLogistic(rows [][]float32, y []float64, iterations int, rate, l2 float64) logisticRegression {
	n, f := len(rows), len(rows[0])
	mean := make([]float64, f)
	sd := make([]float64, f)
	for _, r := range rows {
		for j, v := range r {
			mean[j] += float64(v)
		}
	}
	for j := range mean {
		mean[j] /= float64(n)
	}
	for _, r := range rows {
		for j, v := range r {
			d := float64(v) - mean[j]
			sd[j] += d * d
		}
	}
	for j := range sd {
		sd[j] = math.Sqrt(sd[j] / float64(n))
		if sd[j] == 0 {
			sd[j] = 1
		}
	}
	z := make([][]float64, n)
	for i, r := range rows {
		z[i] = make([]float64, f)
		for j, v := range r {
			z[i][j] = (float64(v) - mean[j]) / sd[j]
		}
	}
	pos := 0.0
	for _, v := range y {
		pos += v
	}
	// Balanced class weights: each class weighs half of the loss.
	wPos, wNeg := float64(n)/(2*pos), float64(n)/(2*(float64(n)-pos))
	w := make([]float64, f)
	b := 0.0
	grad := make([]float64, f)
	for range iterations {
		clear(grad)
		gb := 0.0
		for i, x := range z {
			s := b
			for j, v := range x {
				s += w[j] * v
			}
			p := 1 / (1 + math.Exp(-s))
			cw := wNeg
			if y[i] > 0 {
				cw = wPos
			}
			e := cw * (p - y[i])
			for j, v := range x {
				grad[j] += e * v
			}
			gb += e
		}
		for j := range w {
			w[j] -= rate * (grad[j]/float64(n) + l2*w[j])
		}
		b -= rate * gb / float64(n)
	}
	m := logisticRegression{w: make([]float32, f)}
	raw := b
	for j := range w {
		m.w[j] = float32(w[j] / sd[j])
		raw -= w[j] * mean[j] / sd[j]
	}
	m.b = float32(raw)
	return m
}

// predict is the model's probability for one row, in float64.
func (m logisticRegression) predict(row []float32) float64 {
	s := float64(m.b)
	for j, v := range row {
		s += float64(m.w[j]) * float64(v)
	}
	return 1 / (1 + math.Exp(-s))
}

// shuffled returns a copy of y in an order drawn from seed: labels that no
// longer belong to their rows.
func shuffled(y []float64, seed uint64) []float64 {
	out := append([]float64(nil), y...)
	r := rand.New(rand.NewPCG(seed, 0x7368756666))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
