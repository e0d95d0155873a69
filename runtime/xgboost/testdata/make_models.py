"""Trains small XGBoost models and records the library's own predictions.

Usage: python3 make_models.py OUTDIR

Writes OUTDIR/<case>.json (the model, Booster.save_model) and
OUTDIR/cases.json: for every case the model file, the output kind, random
input rows (float32, NaN as null) and xgboost's predictions on them, or the
error Load must give. The Go test (xgboost_test.go) runs this at test time so
that no model is committed; data comes from sklearn's generators with fixed
seeds.
"""

import json
import math
import os
import sys

import numpy as np
import xgboost as xgb
from sklearn.datasets import make_classification, make_regression

OUT = sys.argv[1]
cases = []


def nan_to_none(rows):
    return [[None if math.isnan(v) else float(v) for v in r] for r in rows]


def random_rows(X, n, seed, nan_frac=0.0):
    """Rows drawn around the training data, as float32."""
    rs = np.random.RandomState(seed)
    mu = np.nanmean(X, axis=0)
    sd = np.nanstd(X, axis=0) + 1e-3
    R = (rs.normal(size=(n, X.shape[1])) * sd + mu).astype(np.float32)
    if nan_frac:
        R[rs.uniform(size=R.shape) < nan_frac] = np.nan
    return R


def add(name, booster, rows, want, kind, **extra):
    path = name + ".json"
    booster.save_model(os.path.join(OUT, path))
    want = np.asarray(want, dtype=np.float64)
    if want.ndim == 1:
        want = want[:, None]
    case = {
        "name": name,
        "model": path,
        "kind": kind,
        "rows": nan_to_none(rows),
        "want": [[float(v) for v in r] for r in want],
    }
    case.update(extra)
    cases.append(case)


def add_error(name, booster, error):
    path = name + ".json"
    booster.save_model(os.path.join(OUT, path))
    cases.append({"name": name, "model": path, "error": error})


def classification(seed, n_classes=2, n=800, features=10):
    X, y = make_classification(n_samples=n, n_features=features, n_informative=6,
                               n_redundant=2, n_classes=n_classes, random_state=seed)
    return X.astype(np.float32), y


# Binary, default base_score, exact tree method.
X, y = classification(1)
b = xgb.train({"objective": "binary:logistic", "max_depth": 5, "eta": 0.3,
               "tree_method": "exact", "seed": 1}, xgb.DMatrix(X, label=y), 40)
R = random_rows(X, 200, 11)
add("binary", b, R, b.predict(xgb.DMatrix(R)), "probability")

# Binary with a base_score other than 0.5: its logit is the starting margin.
b = xgb.train({"objective": "binary:logistic", "max_depth": 4, "eta": 0.2,
               "base_score": 0.3, "tree_method": "hist", "seed": 2},
              xgb.DMatrix(X, label=y), 25)
add("binary_base_score", b, R, b.predict(xgb.DMatrix(R)), "probability")

# Multiclass, probabilities.
X, y = classification(3, n_classes=4)
b = xgb.train({"objective": "multi:softprob", "num_class": 4, "max_depth": 4,
               "eta": 0.3, "tree_method": "hist", "seed": 3},
              xgb.DMatrix(X, label=y), 30)
R = random_rows(X, 200, 13)
add("multi_softprob", b, R, b.predict(xgb.DMatrix(R)), "probability")

# multi:softmax predicts labels; the runtime gives the softmax of the margins,
# whose argmax must be xgboost's label.
X, y = classification(4, n_classes=3)
b = xgb.train({"objective": "multi:softmax", "num_class": 3, "max_depth": 4,
               "eta": 0.3, "tree_method": "hist", "seed": 4},
              xgb.DMatrix(X, label=y), 20)
R = random_rows(X, 200, 14)
margin = b.predict(xgb.DMatrix(R), output_margin=True).astype(np.float64)
prob = np.exp(margin - margin.max(axis=1, keepdims=True))
prob /= prob.sum(axis=1, keepdims=True)
add("multi_softmax", b, R, prob, "probability",
    labels=[int(v) for v in b.predict(xgb.DMatrix(R))])

# Regression with large targets and base_score at their mean.
X, y = make_regression(n_samples=600, n_features=8, n_informative=6, noise=10.0,
                       random_state=5)
X = X.astype(np.float32)
b = xgb.train({"objective": "reg:squarederror", "max_depth": 6, "eta": 0.3,
               "base_score": float(y.mean()), "tree_method": "hist", "seed": 5},
              xgb.DMatrix(X, label=y), 50)
R = random_rows(X, 200, 15)
add("regression", b, R, b.predict(xgb.DMatrix(R)), "value")

# Poisson counts: base_score's log is the starting margin, exp the output.
rs = np.random.RandomState(6)
yc = rs.poisson(np.exp(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.5))
b = xgb.train({"objective": "count:poisson", "max_depth": 4, "eta": 0.3,
               "tree_method": "hist", "seed": 6}, xgb.DMatrix(X, label=yc), 30)
add("poisson", b, R, b.predict(xgb.DMatrix(R)), "value")

# Missing values in training and at prediction: NaN follows default_left.
X, y = classification(7)
rs = np.random.RandomState(7)
Xm = X.copy()
Xm[rs.uniform(size=X.shape) < 0.25] = np.nan
b = xgb.train({"objective": "binary:logistic", "max_depth": 5, "eta": 0.3,
               "tree_method": "hist", "seed": 7}, xgb.DMatrix(Xm, label=y), 30)
R = random_rows(X, 300, 17, nan_frac=0.3)
R[0, :] = np.nan
add("missing", b, R, b.predict(xgb.DMatrix(R)), "probability")

# Native categorical features: one with 3 categories (one-hot splits) and one
# with 15 (partition splits); the label depends on both. Prediction rows
# include NaN, unseen categories and non-integer values.
rs = np.random.RandomState(8)
n = 1500
num = rs.normal(size=(n, 4))
c_small = rs.randint(0, 3, size=n)
c_big = rs.randint(0, 15, size=n)
logit = num[:, 0] + np.where(c_small == 1, 1.5, -0.5) + np.where(np.isin(c_big, [1, 4, 6, 9, 13]), 2.0, -1.0)
y = (logit + rs.logistic(size=n) > 0).astype(int)
Xc = np.column_stack([num, c_small, c_big]).astype(np.float32)
Xc[rs.uniform(size=n) < 0.05, 4] = np.nan
types = ["q", "q", "q", "q", "c", "c"]
names = ["amount", "age", "score", "tenure", "channel", "region"]
dtrain = xgb.DMatrix(Xc, label=y, feature_types=types, feature_names=names, enable_categorical=True)
b = xgb.train({"objective": "binary:logistic", "max_depth": 4, "eta": 0.3,
               "tree_method": "hist", "max_cat_to_onehot": 4, "seed": 8}, dtrain, 30)
R = random_rows(num, 300, 18)
R = np.column_stack([R, rs.randint(0, 5, size=300), rs.randint(0, 20, size=300)]).astype(np.float32)
R[rs.uniform(size=300) < 0.1, 4] = np.nan
R[rs.uniform(size=300) < 0.1, 5] = np.nan
R[:20, 5] += 0.5  # a non-integer category is truncated
dpred = xgb.DMatrix(R, feature_types=types, feature_names=names, enable_categorical=True)
add("categorical", b, R, b.predict(dpred), "probability", feature_names=names)

# Dart: each tree's leaves are scaled by its weight_drop.
X, y = classification(9)
b = xgb.train({"booster": "dart", "objective": "binary:logistic", "max_depth": 4,
               "eta": 0.3, "rate_drop": 0.2, "skip_drop": 0.3, "tree_method": "hist",
               "seed": 9}, xgb.DMatrix(X, label=y), 25)
R = random_rows(X, 200, 19)
add("dart", b, R, b.predict(xgb.DMatrix(R)), "probability")

# Boosted random forests: num_parallel_tree trees per class per round.
X, y = classification(10, n_classes=3)
b = xgb.train({"objective": "multi:softprob", "num_class": 3, "num_parallel_tree": 4,
               "subsample": 0.8, "colsample_bynode": 0.8, "max_depth": 4, "eta": 0.5,
               "tree_method": "hist", "seed": 10}, xgb.DMatrix(X, label=y), 6)
R = random_rows(X, 200, 20)
add("parallel_trees", b, R, b.predict(xgb.DMatrix(R)), "probability")

# Early stopping through the scikit-learn interface: its predict_proba uses
# the trees up to best_iteration, which the file records.
X, y = classification(11, n=1200)
clf = xgb.XGBClassifier(n_estimators=300, max_depth=6, learning_rate=0.5,
                        early_stopping_rounds=3, eval_metric="logloss",
                        tree_method="hist", random_state=11)
clf.fit(X[:800], y[:800], eval_set=[(X[800:], y[800:])], verbose=False)
bst = clf.get_booster()
if bst.best_iteration + 1 >= bst.num_boosted_rounds():
    sys.exit("early stopping did not stop early; change the case")
R = random_rows(X, 200, 21)
add("early_stopping", clf, R, clf.predict_proba(R)[:, 1], "probability",
    best_iteration=int(bst.best_iteration), rounds=int(bst.num_boosted_rounds()))

# What Load must refuse, naming it.
X, y = classification(12)
add_error("gblinear", xgb.train({"booster": "gblinear", "objective": "binary:logistic"},
                                xgb.DMatrix(X, label=y), 5), "gblinear")
add_error("ranking", xgb.train({"objective": "rank:pairwise", "max_depth": 3},
                               xgb.DMatrix(X, label=y, group=[100] * 8), 5), "rank:pairwise")
add_error("logitraw", xgb.train({"objective": "binary:logitraw", "max_depth": 3},
                                xgb.DMatrix(X, label=y), 5), "binary:logitraw")

with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump({"xgboost": xgb.__version__, "cases": cases}, f)
