// Package xgboost loads XGBoost models saved as JSON (Booster.save_model
// with a .json name, xgboost 1.0 and later) and scores rows with its own
// tree walk, so the built-in runtime serves them without cgo or the C++
// library. The leaves library reads only XGBoost's old binary format, and the
// walk is small; the tests check it against the real xgboost's predictions.
//
// What it reproduces exactly as xgboost does: gbtree and dart boosters
// (dart trees scaled by their weight_drop), num_parallel_tree, multiclass
// tree groups (tree_info), base_score turned into a margin by the
// objective (logit for logistic objectives, log for poisson, gamma and
// tweedie; one per class as xgboost 3 writes it), a NaN feature following the node's default branch, native
// categorical splits (the node's category set goes right, everything else,
// including a negative or out-of-range category, goes left), float32
// arithmetic in the library's order, and best_iteration: when the file
// records one (early stopping) only the trees up to it are used, as the
// scikit-learn interface's predict does.
//
// The tests train models with the installed xgboost (1.7 on Debian 12) at
// test time and also read files saved by xgboost 3.1.1 with that version's
// predictions (testdata/xgboost3).
//
// Output: binary:logistic gives one value, the positive class's
// probability; multi:softprob and multi:softmax give one probability per
// class (the softmax of the margins, so multi:softmax's label is their
// argmax); the regression objectives give their value. A booster or
// objective it does not reproduce (gblinear, ranking, survival, margins-only
// objectives, multi-target trees) is refused at Load with its name, never
// scored approximately.
//
// It must not allocate per node or per tree while predicting: Load flattens
// every tree into one node array with absolute child indices and checks
// every index once, so Predict can walk without bounds surprises and never
// panics on a file that loaded.
package xgboost
