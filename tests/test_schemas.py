"""The schema toolkit catches what a real cluster or Helm would silently drop or reject."""

import copy

import pytest

import schemas


def cluster_queue(**spec_overrides) -> dict:
    spec = {
        "namespaceSelector": {},
        "cohortName": "labs",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "l4-spot",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 8},
                            {"name": "memory", "nominalQuota": "32Gi"},
                            # Pulumi mocks hand numbers over as floats.
                            {"name": "nvidia.com/gpu", "nominalQuota": 2.0},
                        ],
                    }
                ],
            }
        ],
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpu", "labels": {"lab": "g3"}},
        "spec": spec,
    }


def deployment() -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "namespace": "serving"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": {"app": "vllm"}},
                "spec": {
                    "enableServiceLinks": False,
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.2",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
    }


def failure(check, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as raised:
        check(*args, **kwargs)
    return str(raised.value)


# --- custom resources -------------------------------------------------------------------------


def test_valid_cluster_queue_passes():
    schemas.validate_custom_resource(cluster_queue())


def test_misspelt_field_fails_with_its_path_and_a_suggestion():
    queue = cluster_queue()
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuata"] = 1
    message = failure(schemas.validate_custom_resource, queue)
    assert "$.spec.resourceGroups[0].flavors[0].resources[0]" in message
    assert "'nominalQuata' (did you mean 'nominalQuota'?)" in message


def test_v1beta1_field_name_fails_in_a_v1beta2_object():
    # v1beta2 renamed spec.cohort to spec.cohortName; a real cluster would prune `cohort` silently.
    queue = cluster_queue(cohort="labs")
    message = failure(schemas.validate_custom_resource, queue)
    assert "$.spec" in message and "'cohort' (did you mean 'cohortName'?)" in message


def test_v1beta2_field_in_the_wrong_place_fails():
    queue = cluster_queue()
    flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["nominalQuota"] = flavor["resources"][2].pop("nominalQuota")
    message = failure(schemas.validate_custom_resource, queue)
    assert "$.spec.resourceGroups[0].flavors[0]: unknown field(s) 'nominalQuota'" in message
    assert "$.spec.resourceGroups[0].flavors[0].resources[2]: 'nominalQuota' is a required property" in message


def test_custom_resource_metadata_is_checked_as_kubernetes_object_meta():
    queue = cluster_queue()
    queue["metadata"]["label"] = {"lab": "g3"}
    assert "$.metadata: Additional properties are not allowed ('label' was unexpected)" in failure(
        schemas.validate_custom_resource, queue
    )


def test_cluster_workflow_template_is_checked_with_the_full_workflow_template_schema():
    template = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ClusterWorkflowTemplate",
        "metadata": {"name": "train"},
        "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {"image": "python:3.11"}}]},
    }
    schemas.validate_custom_resource(template)
    template["spec"]["entrypoints"] = "main"
    assert "'entrypoints' (did you mean 'entrypoint'?)" in failure(schemas.validate_custom_resource, template)


def test_every_error_is_reported_not_only_the_first():
    queue = cluster_queue(cohort="labs", stopPolicy="Sometimes")
    message = failure(schemas.validate_custom_resource, queue)
    assert "'cohort'" in message and "'Sometimes' is not one of" in message


def test_duplicate_keys_in_a_map_list_fail():
    queue = cluster_queue()
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    assert "duplicate entries in a list of type map: ('l4-spot',)" in failure(schemas.validate_custom_resource, queue)


def test_quantity_must_be_an_integer_or_a_string():
    queue = cluster_queue()
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = {"value": 8}
    assert "resources[0].nominalQuota" in failure(schemas.validate_custom_resource, queue)


def test_unknown_kind_fails_naming_what_is_available():
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueu", "metadata": {"name": "x"}}
    message = failure(schemas.validate_custom_resource, obj)
    assert "'ClusterQueu'" in message and "ClusterQueue" in message and "LocalQueue" in message


def test_unknown_group_lists_every_kind():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}
    message = failure(schemas.validate_custom_resource, obj)
    assert "InferenceService (serving.kserve.io)" in message and "Workload (kueue.x-k8s.io)" in message


def test_version_that_is_not_served_fails():
    queue = cluster_queue()
    queue["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    message = failure(schemas.validate_custom_resource, queue)
    assert "v1beta1, v1beta2" in message


@pytest.mark.parametrize(
    "obj",
    [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "l4-spot"},
            "spec": {
                "nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "vllm"},
            "spec": {
                "selector": {"matchLabels": {"app": "vllm"}},
                "endpoints": [{"port": "http", "interval": "15s"}],
            },
        },
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "sklearn", "annotations": {"serving.kserve.io/deploymentMode": "Knative"}},
            "spec": {
                "predictor": {
                    "minReplicas": 0,
                    "canaryTrafficPercent": 10,
                    "model": {
                        "modelFormat": {"name": "sklearn"},
                        "storageUri": "gs://bucket/model",
                        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
                    },
                }
            },
        },
    ],
    ids=lambda obj: obj["kind"],
)
def test_realistic_custom_resources_pass(obj):
    schemas.validate_object(obj)


def test_go_regex_flags_in_crd_patterns_are_honoured():
    # prometheus-operator writes "^(?i)(abort|warn)?$", which Python's re rejects as written.
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpu"},
        "spec": {"groups": [{"name": "g", "partial_response_strategy": "WARN", "rules": [{"record": "a:b", "expr": "up"}]}]},
    }
    schemas.validate_custom_resource(rule)
    rule["spec"]["groups"][0]["partial_response_strategy"] = "ignore"
    assert "partial_response_strategy" in failure(schemas.validate_custom_resource, rule)


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer", "nullable": True}, None, "1"),
        ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, 1, 0),
        ({"x-kubernetes-int-or-string": True}, "50%", 1.5),
        ({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, {"any": {"thing": 1}}, 3),
        (
            {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {"spec": {"type": "object"}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}},
            {"apiVersion": "v1", "kind": "Pod", "status": {}},
        ),
    ],
    ids=["nullable", "exclusive-minimum", "int-or-string", "preserve-unknown", "embedded-resource"],
)
def test_openapi_extensions_are_understood(schema, good, bad):
    # No pinned CRD uses every extension, so these use the schema translation directly.
    validator = schemas._CrdValidator(
        schemas._structural({"type": "object", "properties": {"field": schema}}, resource=True)
    )
    assert not list(validator.iter_errors({"field": good}))
    assert list(validator.iter_errors({"field": bad}))


# --- core objects -----------------------------------------------------------------------------


def test_k8s_version_is_one_kubernetes_validate_ships():
    import kubernetes_validate.utils

    assert schemas.K8S_VERSION in {".".join(v.split(".")[:2]) for v in kubernetes_validate.utils.all_versions()}


def test_core_deployment_passes():
    schemas.validate_core(deployment())


def test_core_deployment_with_a_typo_fails_with_its_path():
    obj = deployment()
    obj["spec"]["template"]["spec"]["enableServiceLink"] = False
    message = failure(schemas.validate_core, obj)
    assert "$.spec.template.spec" in message and "'enableServiceLink' was unexpected" in message


def test_unknown_core_kind_fails():
    assert "Deploymint" in failure(schemas.validate_core, {**deployment(), "kind": "Deploymint"})


def test_validate_object_dispatches_by_group():
    schemas.validate_object(deployment())
    schemas.validate_object(cluster_queue())
    broken = deployment()
    broken["spec"]["replica"] = 1
    assert "not a valid Kubernetes" in failure(schemas.validate_object, broken)
    assert "kueue.x-k8s.io_clusterqueues.yaml" in failure(schemas.validate_object, cluster_queue(cohort="x"))


# --- Helm values ------------------------------------------------------------------------------


def test_real_kueue_values_pass():
    schemas.assert_helm_values_exist(
        {
            "enablePrometheus": True,
            "controllerManager": {
                "manager": {"resources": {"requests": {"cpu": "100m"}, "limits": {"ephemeral-storage": "1Gi"}}},
                "nodeSelector": {"cloud.google.com/gke-nodepool": "system"},
            },
        },
        "kueue/v0.19.2",
    )


def test_misspelt_kueue_value_fails_with_the_nearest_existing_path():
    message = failure(
        schemas.assert_helm_values_exist,
        {"enablePrometheus": True, "controllerManager": {"manager": {"resourcse": {}}}, "enablePrometeus": True},
        "kueue/v0.19.2",
    )
    assert "controllerManager.manager.resourcse (nearest existing: controllerManager.manager.resources)" in message
    assert "enablePrometeus (nearest existing: enablePrometheus)" in message


def test_map_where_the_chart_has_a_scalar_fails():
    message = failure(schemas.assert_helm_values_exist, {"enablePrometheus": {"enabled": True}}, "kueue/v0.19.2")
    assert "enablePrometheus.enabled" in message


def test_subchart_values_pass_whether_or_not_upstream_holds_their_defaults():
    schemas.assert_helm_values_exist(
        {
            "grafana": {"sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard"}}},
            "prometheus-node-exporter": {"anything": {"below": 1}},
            "crds": {"upgradeJob": {"enabled": False}},
        },
        "kube-prometheus-stack/88.5.3",
    )


def test_local_subchart_values_are_checked_against_its_values_yaml():
    message = failure(schemas.assert_helm_values_exist, {"crds": {"upgradeJb": {}}}, "kube-prometheus-stack/88.5.3")
    assert "crds.upgradeJb" in message


def test_subchart_alias_is_accepted():
    # nvidia-device-plugin depends on node-feature-discovery under the alias `nfd`.
    schemas.assert_helm_values_exist({"nfd": {"worker": {"tolerations": []}}}, "nvidia-device-plugin/v0.20.0")


def test_key_documented_only_in_a_comment_needs_naming_and_must_be_documented():
    values = {"customMetrics": "DCGM_FI_PROF_SM_ACTIVE, gauge, SM active.\n"}
    assert "customMetrics" in failure(schemas.assert_helm_values_exist, values, "dcgm-exporter/4.5.3-4.8.2")
    schemas.assert_helm_values_exist(values, "dcgm-exporter/4.5.3-4.8.2", commented_keys=["customMetrics"])
    message = failure(
        schemas.assert_helm_values_exist, {"madeUp": 1}, "dcgm-exporter/4.5.3-4.8.2", commented_keys=["madeUp"]
    )
    assert "not documented in a comment" in message


def test_unknown_chart_dir_fails_listing_charts():
    message = failure(schemas.assert_helm_values_exist, {}, "kueue/v0.99.0")
    assert "kueue/v0.19.2" in message
