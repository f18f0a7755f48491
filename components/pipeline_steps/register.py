"""Register the trained model: copy it to the artefact bucket with a metadata JSON beside it, and
write the gs:// path (what KServe's storageUri takes) to STORAGE_URI_FILE."""

import datetime
import json
import os
import pathlib
import sys

if os.environ["FAIL_STEP"] == "register":
    sys.exit("fail_step=register: this step fails on purpose")

from google.cloud import storage  # credentials: Workload Identity, no key

model_dir = pathlib.Path(os.environ["MODEL_DIR"])
bucket_name = os.environ["BUCKET"]
prefix = f"models/{os.environ['MODEL_NAME']}/{os.environ['WORKFLOW_NAME']}"
bucket = storage.Client().bucket(bucket_name)
bucket.blob(f"{prefix}/model.joblib").upload_from_filename(str(model_dir / "model.joblib"))
metadata = {
    "model": os.environ["MODEL_NAME"],
    "workflow": os.environ["WORKFLOW_NAME"],
    "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "framework": "sklearn",
    "metrics": json.loads((model_dir / "metrics.json").read_text()),
}
bucket.blob(f"{prefix}/metadata.json").upload_from_string(json.dumps(metadata), content_type="application/json")
uri = f"gs://{bucket_name}/{prefix}"
pathlib.Path(os.environ["STORAGE_URI_FILE"]).write_text(uri)
print(json.dumps({"storage_uri": uri, **metadata}))
