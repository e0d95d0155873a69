// Package lightgbm loads LightGBM text models (Booster.save_model, the
// "tree / version=vN" format) and scores rows with the leaves library
// (github.com/dmitryikh/leaves), which walks LightGBM's trees, numerical and
// categorical splits and missing-value rules in pure Go.
//
// What this package adds around leaves, because leaves does not do it:
//
//   - Checking the file before leaves sees it. leaves indexes its arrays
//     with the file's numbers unchecked, so a truncated or hand-edited file
//     could panic in Load or, worse, in Predict. Load reads every tree block
//     the way leaves will and checks array lengths, child and feature
//     indices, category bitset boundaries and that the children form a tree.
//   - Files from LightGBM 4 (version=v4). leaves accepts v2 and v3; the tree
//     blocks of v4 are read the same way (checked against LightGBM 4's own
//     predictions), except linear trees, which leaves would silently score
//     as constant trees and which are refused instead.
//   - The objective's output transform, applied here to leaves' raw scores:
//     binary (sigmoid with the file's sigmoid factor) and cross_entropy give
//     the positive class's probability; multiclass (softmax) and
//     multiclassova (one sigmoid per class) one probability per class; the
//     regression objectives their value (squared back for "sqrt"), poisson,
//     gamma and tweedie the exponential of the score.
//
// Refused, by name, with ErrUnsupported: ranking and custom objectives,
// linear trees, and random forests saved by LightGBM 3 or later, whose
// output convention no reference file here can confirm (random forests in
// the v2 format are read as leaves reads them, checked against LightGBM).
package lightgbm
