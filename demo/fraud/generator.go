package fraud

import (
	"math"
	"math/rand/v2"
)

// MerchantCategories are merchant_category's values, in the models' order.
var MerchantCategories = []string{
	"grocery", "electronics", "travel", "gambling", "fuel", "restaurants", "online_services",
}

// Countries are country's values (ISO 3166 alpha-2), in the models' order.
// The cards are issued in HomeCountry; every other country is foreign.
var Countries = []string{"US", "CA", "MX", "GB", "DE", "FR", "BR", "NG", "IN", "RU"}

// HomeCountry is where the demo's cards are issued.
const HomeCountry = "US"

// Feature names, in the order both models read them.
const (
	FeatureAmount           = "amount"
	FeatureMerchantCategory = "merchant_category"
	FeatureCountry          = "country"
	FeatureHourOfDay        = "hour_of_day"
	FeatureAccountAgeDays   = "account_age_days"
	FeatureDistanceKM       = "distance_km"
)

// Labels of the two classes, negative first as model.Output wants them.
const (
	LabelLegit = "legit"
	LabelFraud = "fraud"
)

// Transaction is one synthetic card payment.
type Transaction struct {
	// Instance is the payment as a model instance: the six features keyed
	// by name (amount, hour_of_day, account_age_days and distance_km are
	// float64; merchant_category and country strings), ready to be
	// marshalled into a predict request.
	Instance map[string]any
	// Fraud is the label the planted rule drew for it.
	Fraud bool
}

// Label is the transaction's class name, LabelFraud or LabelLegit.
func (t Transaction) Label() string {
	if t.Fraud {
		return LabelFraud
	}
	return LabelLegit
}

// Generator draws synthetic transactions, deterministically from its seed.
// It is not safe for concurrent use; give each goroutine its own.
type Generator struct {
	rng *rand.Rand
}

// NewGenerator returns a generator whose sequence of transactions depends
// only on seed.
func NewGenerator(seed uint64) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, 0x66726175640a))}
}

// Per-category spending: the median amount (USD) and how risky the category
// is for the planted rule.
var categoryProfile = map[string]struct {
	median float64
	weight float64 // share of payments
	risky  bool
}{
	"grocery":         {median: 45, weight: 0.24},
	"electronics":     {median: 180, weight: 0.10, risky: true},
	"travel":          {median: 320, weight: 0.08},
	"gambling":        {median: 90, weight: 0.05, risky: true},
	"fuel":            {median: 50, weight: 0.16},
	"restaurants":     {median: 38, weight: 0.22},
	"online_services": {median: 22, weight: 0.15},
}

// countryWeights are the shares of payments per country, Countries' order.
var countryWeights = []float64{0.72, 0.05, 0.04, 0.04, 0.03, 0.03, 0.03, 0.02, 0.02, 0.02}

// Next draws one transaction. drift shifts the amount distribution: amounts
// are scaled by 1+drift, so 0 is the distribution the demo models were
// trained on and, say, 0.3 is 30 % larger payments (callers raise it slowly
// to make drift dashboards move). A negative drift below -0.9 is taken as
// -0.9. The label is drawn from the planted rule on the drifted amount, as
// the world would label it.
func (g *Generator) Next(drift float64) Transaction {
	r := g.rng
	cat := MerchantCategories[pick(r, func(i int) float64 { return categoryProfile[MerchantCategories[i]].weight }, len(MerchantCategories))]
	country := Countries[pick(r, func(i int) float64 { return countryWeights[i] }, len(Countries))]
	scale := 1 + math.Max(drift, -0.9)
	amount := categoryProfile[cat].median * math.Exp(0.9*r.NormFloat64()) * scale
	amount = math.Round(amount*100) / 100

	// Most payments are in the day; one in eight at night (0-5 h).
	var hour float64
	if r.Float64() < 0.125 {
		hour = float64(r.IntN(6))
	} else {
		hour = float64(6 + r.IntN(18))
	}
	age := math.Min(math.Round(r.ExpFloat64()*700), 3650)
	var distance float64
	if country == HomeCountry {
		distance = r.ExpFloat64() * 25
	} else {
		distance = 800 + r.ExpFloat64()*4000
	}
	distance = math.Round(distance*10) / 10

	return Transaction{
		Instance: map[string]any{
			FeatureAmount:           amount,
			FeatureMerchantCategory: cat,
			FeatureCountry:          country,
			FeatureHourOfDay:        hour,
			FeatureAccountAgeDays:   age,
			FeatureDistanceKM:       distance,
		},
		Fraud: r.Float64() < FraudProbability(amount, cat, country, hour, age, distance),
	}
}

// FraudProbability is the planted rule: the probability that a payment with
// these features is fraud. The risk is in a large payment (over 300) at an
// electronics or gambling merchant, abroad, at night (0-5 h) and on a young
// account (under 30 days); each adds to the log-odds, and together they make
// fraud near certain. Everything else is rarely fraud.
func FraudProbability(amount float64, category, country string, hour, accountAgeDays, distanceKM float64) float64 {
	z := -6.2
	risky := categoryProfile[category].risky
	if amount > 300 {
		z += 1.0
		if risky {
			z += 3.2
		}
	}
	if country != HomeCountry {
		z += 2.3
	}
	if hour < 6 {
		z += 2.4
	}
	if accountAgeDays < 30 {
		z += 1.8
	}
	z += 0.3 * math.Min(distanceKM/2000, 2)
	return 1 / (1 + math.Exp(-z))
}

// pick draws an index by weight.
func pick(r *rand.Rand, weight func(int) float64, n int) int {
	total := 0.0
	for i := range n {
		total += weight(i)
	}
	u := r.Float64() * total
	for i := range n {
		u -= weight(i)
		if u < 0 {
			return i
		}
	}
	return n - 1
}
