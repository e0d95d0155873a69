// Package fraud builds the demo's fraud model, deterministically and in Go,
// from synthetic card payments with a planted rule, so that `modelplane dev`
// serves a real model whose scores depend on its inputs. It owns the
// synthetic payments (Generator), the two demo versions' files and their
// serving configurations (Versions), and nothing else: it does no I/O, and
// registering, uploading and serving the versions is the demo loader's and
// the runtime's work.
//
// # Payments
//
// A Transaction has six features: amount (USD, ≥ 0), merchant_category (one
// of MerchantCategories), country (one of Countries; the cards are issued in
// HomeCountry), hour_of_day (0-23), account_age_days and distance_km (from
// the card's home). Its label is drawn from FraudProbability, the planted
// rule: a large payment (over 300) at an electronics or gambling merchant,
// abroad, at night, on an account younger than 30 days is near-certain
// fraud, and each of those adds to the log-odds on its own; about 3.4 % of
// payments are fraud.
//
//	g := fraud.NewGenerator(seed)   // one per goroutine
//	tx := g.Next(drift)             // drift 0: the training distribution
//	body, _ := json.Marshal(map[string]any{"instances": []any{tx.Instance}})
//	_ = tx.Label()                  // "fraud" or "legit", the truth
//
// drift scales amounts by 1+drift, so traffic whose drift rises slowly from
// 0 moves the amount feature's drift score and, through it, the models'
// scores.
//
// # Versions
//
// Versions(DefaultSeed) returns, in about 0.1 s and byte-for-byte the same
// on every call:
//
//   - v23, an XGBoost JSON model (the format xgboost 1.7 saves) of 40
//     depth-3 trees grown by this package's gradient-boosting trainer on
//     4,000 payments: logistic loss, exact greedy splits, and XGBoost's
//     native categorical splits for merchant_category and country (their
//     serving encoding is "native": the category's index). The real
//     xgboost 1.7.4 loads it and predicts what runtime/xgboost predicts.
//     Held-out AUC is about 0.9, near the rule's own.
//   - v24, an ONNX logistic regression (MatMul, Add, Sigmoid, written by
//     runtime/onnx/onnxgen) over the same features with one-hot categories
//     (encoding "onehot"), trained with balanced class weights on the same
//     payments with their labels shuffled. It loads, serves fast and never
//     errs, but learnt nothing: it scores every payment near 0.5 (AUC about
//     0.5) and labels about half of them fraud where v23 labels 2 %, so the
//     drift gate's label-share KL and score Wasserstein distance both flag
//     it far above their thresholds and a canary of v24 is rolled back.
//
// Each Version carries its registry runtime and format, the file's name and
// bytes, its honest held-out AUC, and Serving, a model.Config with the
// features in order (categories and encoding), the output mapping (classes
// legit and fraud, threshold 0.5) and sample inputs for warm-up; the agent
// adds the endpoint's model name, the version and the batching settings.
// InputSchema is the model's JSON Schema of an instance.
package fraud
