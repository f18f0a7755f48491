"""Train a tiny scikit-learn classifier on iris and write it (and its metrics) to MODEL_DIR."""

import json
import os
import pathlib
import sys

if os.environ["FAIL_STEP"] == "train":
    sys.exit("fail_step=train: this step fails on purpose")

import joblib
from sklearn import datasets, svm

features, labels = datasets.load_iris(return_X_y=True)
model = svm.SVC(gamma="scale").fit(features, labels)
out = pathlib.Path(os.environ["MODEL_DIR"])
out.mkdir(parents=True, exist_ok=True)
joblib.dump(model, out / "model.joblib")
metrics = {"train_accuracy": model.score(features, labels), "samples": len(labels)}
(out / "metrics.json").write_text(json.dumps(metrics))
print(json.dumps(metrics))
