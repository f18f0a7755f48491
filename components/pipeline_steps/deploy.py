"""Deploy the registered model as a KServe InferenceService: create it, or patch it if it exists.

The predictor comes ready from the WorkflowTemplate (PREDICTOR, built by components.argo with the
project's restricted settings); this step adds the model's storageUri. Uses exactly the verbs the
workflow's Role grants on inferenceservices: get, create, patch.
"""

import json
import os
import sys

if os.environ["FAIL_STEP"] == "deploy":
    sys.exit("fail_step=deploy: this step fails on purpose")

from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "serving.kserve.io", "v1beta1", "inferenceservices"
name, namespace = os.environ["MODEL_NAME"], os.environ["NAMESPACE"]
predictor = json.loads(os.environ["PREDICTOR"])
predictor["model"]["storageUri"] = os.environ["STORAGE_URI"]
body = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "InferenceService",
    "metadata": {
        "name": name,
        "namespace": namespace,
        "annotations": {"serving.kserve.io/deploymentMode": "Knative"},
    },
    "spec": {"predictor": predictor},
}
config.load_incluster_config()
api = client.CustomObjectsApi()
try:
    api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
except ApiException as error:
    if error.status != 404:
        raise
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    action = "created"
else:
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, body)
    action = "patched"
result = {"inferenceservice": f"{namespace}/{name}", "action": action, "storage_uri": os.environ["STORAGE_URI"]}
print(json.dumps(result))
