"""Scores rows with the real xgboost, for demo/fraud's tests.

Usage: python3 xgb_predict.py MODEL_JSON ROWS_JSON

ROWS_JSON is {"feature_names": [...], "feature_types": ["q" | "c", ...],
"rows": [[...], ...]}, categorical columns holding category indexes. Prints
{"xgboost": version, "predictions": [...]} — Booster.predict on a DMatrix
with native categorical support, as a model trained with categorical
features is scored.
"""

import json
import sys

import numpy as np
import xgboost as xgb

with open(sys.argv[2]) as f:
    spec = json.load(f)
booster = xgb.Booster()
booster.load_model(sys.argv[1])
X = np.asarray(spec["rows"], dtype=np.float32)
d = xgb.DMatrix(X, feature_names=spec["feature_names"], feature_types=spec["feature_types"],
                enable_categorical=True)
json.dump({"xgboost": xgb.__version__, "predictions": booster.predict(d).tolist()}, sys.stdout)
