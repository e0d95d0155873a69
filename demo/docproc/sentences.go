package docproc

import (
	"math/rand/v2"
	"strings"
)

// Classes are the document types the classifier tells apart, in the order
// of its output.
var Classes = []string{"invoice", "contract", "support_ticket", "job_application"}

// templates are sentence patterns per class; {x} slots take fillers.
// Training draws from the first trainTemplates of each class; the rest
// are held out, so that held-out accuracy measures sentences of a shape
// the classifier never saw.
var templates = map[string][]string{
	"invoice": {
		"Please find attached invoice {num} for {amount} due within {days} days.",
		"Invoice {num}: {amount} for {service}, payment due by {day}.",
		"Your payment of {amount} for invoice {num} is overdue, please pay promptly.",
		"Billing statement: {service} charged {amount}, remit payment to account {num}.",
		"Amount due {amount}, tax included, reference invoice {num}.",
		"We have not received payment for the invoice sent on {day}; the balance is {amount}.",
		"Total {amount} for {service}; please transfer the amount due before {day}.",
		"Receipt and invoice {num} for your order: subtotal, tax and total {amount}.",
	},
	"contract": {
		"This agreement is entered into by the parties on {day} and governs {service}.",
		"The contractor shall provide {service} under the terms of this contract.",
		"Either party may terminate this agreement with {days} days written notice.",
		"The parties agree to the confidentiality clause and the governing law of this contract.",
		"This contract for {service} is signed by both parties and effective from {day}.",
		"Liability under this agreement is limited, and any dispute goes to arbitration.",
		"The term of the agreement is {days} months, renewed unless either party gives notice.",
		"Schedule A of the contract lists the obligations of the supplier for {service}.",
	},
	"support_ticket": {
		"My {product} stopped working after the update, please help.",
		"I cannot log in to my account, the password reset email never arrives.",
		"The {product} shows an error when I try to open it, can you fix this?",
		"Hello support, my order {num} arrived damaged and I need a replacement.",
		"The app crashes every time I upload a file, this is urgent.",
		"I was charged twice and my {product} still does not work, please assist.",
		"Since {day} the {product} keeps freezing; I have restarted it many times.",
		"Ticket: customer reports the {product} is broken and asks for a refund.",
	},
	"job_application": {
		"I am writing to apply for the position of {role} at your company.",
		"Please find my resume attached for the {role} opening.",
		"I have {days} years of experience as a {role} and would love to join your team.",
		"My skills in {skill} make me a strong candidate for the {role} role.",
		"I am excited to apply and available for an interview from {day}.",
		"Cover letter: experienced {role} with a background in {skill} seeks a new position.",
		"I graduated in {skill} and worked as a {role}; references are available on request.",
		"Thank you for considering my application for the {role} vacancy.",
	},
}

// trainTemplates of each class's templates are trained on.
const trainTemplates = 6

var fillers = map[string][]string{
	"num":     {"4521", "INV-0093", "77-210", "1009", "A-3318", "58120"},
	"amount":  {"$1,250.00", "€480", "$99.90", "£3,400", "$12,000", "€75.50"},
	"days":    {"30", "14", "60", "7", "90", "12"},
	"day":     {"Friday", "March 3", "the first of June", "Monday", "December 31", "next week"},
	"service": {"consulting services", "cloud hosting", "office cleaning", "software licences", "legal advice", "maintenance"},
	"product": {"laptop", "router", "phone", "printer", "smart watch", "mobile app"},
	"role":    {"data engineer", "nurse", "accountant", "designer", "sales manager", "teacher"},
	"skill":   {"statistics", "project management", "python", "marketing", "nursing care", "finance"},
}

// Sentence is a labelled example.
type Sentence struct {
	Text  string
	Class int
}

// Document draws one document of a random class from all of its class's
// templates, training and held-out alike, as the pipeline's consumers
// would send it (the demo's traffic).
func Document(rng *rand.Rand) Sentence {
	c := rng.IntN(len(Classes))
	ts := templates[Classes[c]]
	return Sentence{Text: fill(rng, ts[rng.IntN(len(ts))]), Class: c}
}

// sentences draws n sentences per class from each class's templates,
// either the training ones or the held-out ones.
func sentences(rng *rand.Rand, n int, heldOut bool) []Sentence {
	var out []Sentence
	for c, class := range Classes {
		ts := templates[class][:trainTemplates]
		if heldOut {
			ts = templates[class][trainTemplates:]
		}
		for range n {
			out = append(out, Sentence{Text: fill(rng, ts[rng.IntN(len(ts))]), Class: c})
		}
	}
	return out
}

// fill replaces a template's slots from left to right, so that the same
// generator state gives the same sentence.
func fill(rng *rand.Rand, t string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			b.WriteString(t)
			return b.String()
		}
		end := strings.IndexByte(t[open:], '}') + open
		vs := fillers[t[open+1:end]]
		b.WriteString(t[:open])
		b.WriteString(vs[rng.IntN(len(vs))])
		t = t[end+1:]
	}
}
