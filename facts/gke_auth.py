"""gke-gcloud-auth-plugin, the exec credential plugin every GKE kubeconfig runs: how it is called.

Read 2026-12-01 from kubernetes/cloud-provider-gcp, cmd/gke-gcloud-auth-plugin/cred.go (repository
snapshot of 2026-08-19). Without flags the plugin takes the token of gcloud's active account (`gcloud
auth login`); with --use_application_default_credentials it takes Application Default Credentials
(`gcloud auth application-default login`, a metadata server, ...) instead (kubernetes/cloud-provider-gcp#264).
Either way it prints an ExecCredential (client.authentication.k8s.io/v1beta1) with status.token and
status.expirationTimestamp on stdout, and exits non-zero with the reason on stderr when it has none.
"""

from __future__ import annotations

AUTH_PLUGIN = "gke-gcloud-auth-plugin"
ADC_FLAG = "--use_application_default_credentials"
INSTALL_HINT = "gcloud components install gke-gcloud-auth-plugin"
# What to run when the plugin has no token: the login its flags read.
ADC_LOGIN_HINT = "Create Application Default Credentials with `gcloud auth application-default login`"
GCLOUD_LOGIN_HINT = "Log in with `gcloud auth login` (check the account with `gcloud auth list`)"
