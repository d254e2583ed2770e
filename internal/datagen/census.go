// Package datagen generates census-like rows: the columns, value sets and
// file format of UCI Adult (adult.data) with a learnable, seeded income
// label, so trainflow's demo and tests run on a machine without the real
// dataset.
package datagen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

type choice struct {
	value  string
	weight float64
	effect float64 // contribution to the income logit
}

func pick(r *rand.Rand, cs []choice) choice {
	total := 0.0
	for _, c := range cs {
		total += c.weight
	}
	x := r.Float64() * total
	for _, c := range cs {
		if x -= c.weight; x < 0 {
			return c
		}
	}
	return cs[len(cs)-1]
}

var (
	workclasses = []choice{
		{"Private", 70, 0}, {"Self-emp-not-inc", 8, -0.2}, {"Local-gov", 6, 0.1}, {"?", 5, -0.6},
		{"State-gov", 4, 0}, {"Self-emp-inc", 3, 0.7}, {"Federal-gov", 3, 0.5}, {"Without-pay", 0.1, -1.5},
	}
	educations = []struct {
		name string
		num  int
		w    float64
	}{
		{"Preschool", 1, 0.2}, {"1st-4th", 2, 0.5}, {"5th-6th", 3, 1}, {"7th-8th", 4, 2}, {"9th", 5, 1.6},
		{"10th", 6, 2.9}, {"11th", 7, 3.6}, {"12th", 8, 1.3}, {"HS-grad", 9, 32}, {"Some-college", 10, 22},
		{"Assoc-voc", 11, 4.2}, {"Assoc-acdm", 12, 3.3}, {"Bachelors", 13, 16.4}, {"Masters", 14, 5.3},
		{"Prof-school", 15, 1.8}, {"Doctorate", 16, 1.3},
	}
	occupations = []choice{
		{"Prof-specialty", 12.7, 0.6}, {"Craft-repair", 12.6, 0}, {"Exec-managerial", 12.5, 0.8},
		{"Adm-clerical", 11.6, -0.2}, {"Sales", 11.2, 0.2}, {"Other-service", 10.1, -1.2},
		{"Machine-op-inspct", 6.1, -0.4}, {"?", 5.7, -0.6}, {"Transport-moving", 4.9, -0.2},
		{"Handlers-cleaners", 4.2, -0.9}, {"Farming-fishing", 3.1, -0.9}, {"Tech-support", 2.9, 0.4},
		{"Protective-serv", 2, 0.4}, {"Priv-house-serv", 0.5, -2}, {"Armed-Forces", 0.03, 0},
	}
	races = []choice{
		{"White", 85.4, 0}, {"Black", 9.6, -0.3}, {"Asian-Pac-Islander", 3.2, 0}, {"Amer-Indian-Eskimo", 1, -0.3}, {"Other", 0.8, -0.3},
	}
	countries = []choice{
		{"United-States", 89.6, 0}, {"Mexico", 2, -0.8}, {"?", 1.8, 0}, {"Philippines", 0.6, 0}, {"Germany", 0.4, 0},
		{"Canada", 0.4, 0.2}, {"Puerto-Rico", 0.4, -0.4}, {"El-Salvador", 0.3, -0.6}, {"India", 0.3, 0.3},
		{"Cuba", 0.3, 0}, {"England", 0.3, 0.2}, {"China", 0.2, 0}, {"Other", 3.4, -0.1},
	}
)

// Census writes n census-like CSV rows in the format of adult.data
// ("39, State-gov, 77516, Bachelors, …, <=50K") to w. With test set, labels
// end with "." and a comment line comes first, as in adult.test. The same
// seed writes the same rows.
func Census(w io.Writer, n int, seed uint64, test bool) error {
	r := rand.New(rand.NewPCG(seed, 0x7261696e666c6f77))
	bw := bufio.NewWriter(w)
	suffix := ""
	if test {
		suffix = "."
		fmt.Fprintln(bw, "|1x3 Cross validator")
	}
	for range n {
		age := 17 + int(math.Abs(r.NormFloat64()*14+21))
		if age > 90 {
			age = 90
		}
		wc := pick(r, workclasses)
		edu := educations[0]
		{
			total := 0.0
			for _, e := range educations {
				total += e.w
			}
			x := r.Float64() * total
			for _, e := range educations {
				if x -= e.w; x < 0 {
					edu = e
					break
				}
			}
		}
		male := r.Float64() < 0.67
		gender := "Female"
		if male {
			gender = "Male"
		}
		var marital, relationship string
		married := false
		switch x := r.Float64(); {
		case age < 25 && x < 0.8 || x < 0.33:
			marital = "Never-married"
		case x < 0.79:
			marital, married = "Married-civ-spouse", true
		case x < 0.93:
			marital = "Divorced"
		case x < 0.96:
			marital = "Separated"
		default:
			marital = "Widowed"
		}
		switch {
		case married && male:
			relationship = "Husband"
		case married:
			relationship = "Wife"
		case age < 26 && r.Float64() < 0.6:
			relationship = "Own-child"
		case r.Float64() < 0.6:
			relationship = "Not-in-family"
		default:
			relationship = "Unmarried"
		}
		occ := pick(r, occupations)
		race := pick(r, races)
		country := pick(r, countries)
		hours := int(math.Round(40 + r.NormFloat64()*12))
		hours = max(1, min(99, hours))

		logit := -9.6 + 0.36*float64(edu.num) + 0.03*float64(min(age, 60)) + 0.035*float64(hours) +
			wc.effect + occ.effect + race.effect + country.effect
		if married {
			logit += 2.3
		}
		if male {
			logit += 0.3
		}
		gain, loss := 0, 0
		switch x := r.Float64(); {
		case x < 0.05:
			gain = 1000 + r.IntN(4000)
		case x < 0.085:
			gain = 5000 + r.IntN(30000)
			logit += 3.5
		case x < 0.13:
			loss = 1400 + r.IntN(1200)
			logit += 0.8
		}
		label := "<=50K"
		if r.Float64() < 1/(1+math.Exp(-logit)) {
			label = ">50K"
		}
		fnlwgt := 20000 + r.IntN(600000)
		_, err := fmt.Fprintf(bw, "%d, %s, %d, %s, %d, %s, %s, %s, %s, %s, %d, %d, %d, %s, %s%s\n",
			age, wc.value, fnlwgt, edu.name, edu.num, marital, occ.value, relationship, race.value,
			gender, gain, loss, hours, country.value, label, suffix)
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}
