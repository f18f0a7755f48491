"""The billing SQL on DuckDB with the export's schema and real-shaped rows; the BigQuery rendering
of the same template; the CLI against a local server answering like BigQuery's jobs.query."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime, timezone

import duckdb
import pytest

from fake_google import FakeGoogle, GoogleState
from ops import billing
from stacks.stackfile import REPO

# The standard usage cost export's columns (Cloud Billing docs, "Structure of Standard data export"),
# the ones the query reads and the ones around them.
EXPORT_SCHEMA = """
CREATE TABLE export (
  billing_account_id VARCHAR,
  service STRUCT(id VARCHAR, description VARCHAR),
  sku STRUCT(id VARCHAR, description VARCHAR),
  usage_start_time TIMESTAMPTZ,
  usage_end_time TIMESTAMPTZ,
  project STRUCT(id VARCHAR, number VARCHAR, name VARCHAR, labels STRUCT(key VARCHAR, value VARCHAR)[]),
  labels STRUCT(key VARCHAR, value VARCHAR)[],
  system_labels STRUCT(key VARCHAR, value VARCHAR)[],
  location STRUCT(location VARCHAR, country VARCHAR, region VARCHAR, zone VARCHAR),
  export_time TIMESTAMPTZ,
  cost DOUBLE,
  currency VARCHAR,
  currency_conversion_rate DOUBLE,
  usage STRUCT(amount DOUBLE, unit VARCHAR, amount_in_pricing_units DOUBLE, pricing_unit VARCHAR),
  credits STRUCT(name VARCHAR, amount DOUBLE, full_name VARCHAR, id VARCHAR, type VARCHAR)[],
  invoice STRUCT(month VARCHAR),
  cost_type VARCHAR
)
"""
COMPUTE = ("6F81-5844-456A", "Compute Engine")
GKE = ("CCD8-9BF1-090E", "Kubernetes Engine")
GCS = ("95FF-2EF5-5EA1", "Cloud Storage")


def labels(lab: str | None) -> list[dict]:
    base = [{"key": "managed-by", "value": "pulumi"}, {"key": "app", "value": "gke-ml-labs"}]
    return base + ([{"key": "lab", "value": lab}, {"key": "stack", "value": lab}] if lab else [])


def row(service, sku, start: str, cost: float, lab: str | None, credits=()) -> tuple:
    t = datetime.fromisoformat(start).replace(tzinfo=timezone.utc)
    return (
        "012345-6789AB-CDEF01",
        {"id": service[0], "description": service[1]},
        {"id": "SKU-" + sku[:8].upper().replace(" ", ""), "description": sku},
        t, t.replace(minute=59),
        {"id": "lab-project", "number": "123456789012", "name": "lab-project", "labels": []},
        labels(lab),
        [{"key": "compute.googleapis.com/machine_spec", "value": "g2-standard-4"}],
        {"location": "us-central1", "country": "US", "region": "us-central1", "zone": "us-central1-a"},
        t.replace(hour=t.hour), cost, "USD", 1.0,
        {"amount": 3600.0, "unit": "seconds", "amount_in_pricing_units": 1.0, "pricing_unit": "hour"},
        [{"name": n, "amount": a, "full_name": n, "id": n, "type": ty} for n, a, ty in credits],
        {"month": "202611"},
        "regular",
    )


ROWS = [
    row(COMPUTE, "Spot Preemptible Nvidia L4 GPU running in Americas", "2026-11-10T10:00", 0.36, "g6"),
    row(COMPUTE, "Spot Preemptible Nvidia L4 GPU running in Americas", "2026-11-10T11:00", 0.36, "g6"),
    row(COMPUTE, "Spot Preemptible G2 Instance Core running in Americas", "2026-11-10T10:00", 0.05, "g6"),
    row(COMPUTE, "E2 Instance Core running in Americas", "2026-11-10T10:00", 0.09, "g6"),
    row(GKE, "Zonal Kubernetes Clusters", "2026-11-10T10:00", 0.10, "g6",
        credits=[("Free tier", -0.10, "FREE_TIER")]),
    row(GCS, "Standard Storage US Regional", "2026-11-10T10:00", 0.001, "g6"),
    # Another lab, an unlabelled resource, and g6 outside the window: none of them count.
    row(COMPUTE, "Spot Preemptible Nvidia L4 GPU running in Americas", "2026-11-10T10:00", 0.36, "g3"),
    row(COMPUTE, "E2 Instance Core running in Americas", "2026-11-10T10:00", 0.09, None),
    row(COMPUTE, "Spot Preemptible Nvidia L4 GPU running in Americas", "2026-11-12T10:00", 0.36, "g6"),
]
SINCE, UNTIL = billing.window("2026-11-10", "2026-11-11")


@pytest.fixture
def export():
    con = duckdb.connect()
    con.execute(EXPORT_SCHEMA)
    con.executemany(f"INSERT INTO export VALUES ({', '.join('?' * 17)})", ROWS)
    yield con
    con.close()


def query_duckdb(con, lab: str) -> list[billing.CostRow]:
    result = con.execute(billing.render("export", "duckdb"), {"lab": lab, "since": SINCE, "until": UNTIL})
    names = [d[0] for d in result.description]
    return [billing.CostRow(**dict(zip(names, r))) for r in result.fetchall()]


def test_cost_of_one_lab_by_service_and_sku(export):
    rows = query_duckdb(export, "g6")
    by_sku = {(r.service, r.sku): r for r in rows}
    assert set(by_sku) == {
        ("Compute Engine", "Spot Preemptible Nvidia L4 GPU running in Americas"),
        ("Compute Engine", "Spot Preemptible G2 Instance Core running in Americas"),
        ("Compute Engine", "E2 Instance Core running in Americas"),
        ("Kubernetes Engine", "Zonal Kubernetes Clusters"),
        ("Cloud Storage", "Standard Storage US Regional"),
    }
    gpu = by_sku[("Compute Engine", "Spot Preemptible Nvidia L4 GPU running in Americas")]
    assert gpu.cost == pytest.approx(0.72) and gpu.lab == "g6" and gpu.currency == "USD"
    gke = by_sku[("Kubernetes Engine", "Zonal Kubernetes Clusters")]
    assert gke.credits == pytest.approx(-0.10) and gke.net == pytest.approx(0.0)
    assert rows[0] is gpu, "most expensive first"
    assert sum(r.cost for r in rows) == pytest.approx(0.72 + 0.05 + 0.09 + 0.10 + 0.001)


def test_other_labs_and_unlabelled_usage_are_not_counted(export):
    assert sum(r.cost for r in query_duckdb(export, "g3")) == pytest.approx(0.36)
    assert query_duckdb(export, "g9") == []


def test_bigquery_rendering_differs_only_in_dialect():
    bq, duck = billing.render("proj-1.billing.gcp_billing_export_v1_0123", "bigquery"), billing.render("export", "duckdb")
    assert "FROM `proj-1.billing.gcp_billing_export_v1_0123`" in bq
    assert set(re.findall(r"@(\w+)", bq)) == {"lab", "since", "until"} and "$" not in bq
    assert _normalise(bq) == _normalise(duck)


def _normalise(query: str) -> str:
    """The query with the table and the parameter prefix (the only dialect differences) made neutral."""
    neutral = query.replace("`proj-1.billing.gcp_billing_export_v1_0123`", "T").replace('"export"', "T")
    return re.sub(r"[@$](\w+)", r":\1", neutral)


@pytest.mark.parametrize(
    "table, says",
    [
        ("billing_export", "expected PROJECT_ID.DATASET.TABLE of the billing export (three names joined by dots), e.g. "),
        ("proj-1.dataset", "expected PROJECT_ID.DATASET.TABLE"),
        # The README's placeholder, typed as is: upper case is no project ID.
        ("PROJECT.DATASET.TABLE", "'PROJECT' is not a project ID: 6-30 lowercase letters, digits or hyphens"),
        ("proj.billing.t", "'proj' is not a project ID"),  # 4 characters
        ("a-project-id-that-is-31-chars-x.billing.t", "is not a project ID"),
        ("my-project-.billing.t", "is not a project ID"),
        ("proj-1.data set.table", "'data set' is not a dataset name: letters, digits and underscores"),
        ("proj-1.billing.t; DROP TABLE x", "'t; DROP TABLE x' is not a table name"),
    ],
)
def test_bad_table_name_is_rejected_saying_what_is_expected(table, says, capsys):
    with pytest.raises(billing.BillingError, match=re.escape(says)):
        billing.render(table, "bigquery")
    # On the command line: one line, exit 2, no call to Google (no client could even be built).
    assert billing.main(["--table", table, "--lab", "g6", "--since", "2026-11-01"], client=object()) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: --table {table!r}: ") and says in line


def test_the_documented_example_table_name_is_accepted():
    billing.check_table(billing.TABLE_EXAMPLE)
    billing.check_table("proj-1.billing.gcp_billing_export_v1_0123")


MAKE = shutil.which("make")
# Under `make test` the suite inherits the outer make's MAKELEVEL/MAKEFLAGS, and a nested make then prints
# "Entering directory" lines: run it as a user's shell would.
MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
@pytest.mark.parametrize("given, missing", [([], "BILLING_TABLE SINCE"), (["SINCE=2026-11-01"], "BILLING_TABLE")])
def test_make_cost_names_the_missing_variables_before_running_anything(given, missing):
    done = subprocess.run([MAKE, "-n", "cost", "LAB=g6", *given], cwd=REPO, env=MAKE_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"make cost needs {missing}: e.g. make cost LAB=g6 SINCE=2026-11-01 BILLING_TABLE={billing.TABLE_EXAMPLE}" in line


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_make_cost_with_its_variables_runs_the_billing_query():
    done = subprocess.run([MAKE, "-n", "cost", "LAB=g6", "SINCE=2026-11-01", f"BILLING_TABLE={billing.TABLE_EXAMPLE}"],
                          cwd=REPO, env=MAKE_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert f"-m ops.billing --table {billing.TABLE_EXAMPLE} --lab g6 --since 2026-11-01" in done.stdout


def test_window_rules():
    since, until = billing.window("2026-11-01", "2026-11-30")
    assert (until - since).days == 30, "--until as a date includes that day"
    with pytest.raises(billing.BillingError, match="not after"):
        billing.window("2026-11-05", "2026-11-01")
    with pytest.raises(billing.BillingError, match="not an ISO date"):
        billing.window("last week", None)


def bigquery_answer(rows: list[tuple], complete: bool = True) -> dict:
    """A jobs.query / getQueryResults response: schema, then rows of {"f": [{"v": string}]}."""
    answer = {
        "kind": "bigquery#queryResponse",
        "jobReference": {"projectId": "lab-project", "jobId": "job_abc123", "location": "US"},
        "jobComplete": complete,
    }
    if complete:
        fields = ["lab", "service", "sku", "cost", "credits", "currency"]
        types = ["STRING", "STRING", "STRING", "FLOAT", "FLOAT", "STRING"]
        answer |= {
            "schema": {"fields": [{"name": n, "type": t, "mode": "NULLABLE"} for n, t in zip(fields, types)]},
            "totalRows": str(len(rows)),
            "rows": [{"f": [{"v": None if v is None else str(v)} for v in r]} for r in rows],
            "cacheHit": False,
        }
    return answer


def test_cli_runs_the_query_on_bigquery_and_polls(capsys, monkeypatch):
    monkeypatch.setattr(billing.time, "sleep", lambda s: None)
    state = GoogleState(project="lab-project", bigquery_responses=[
        bigquery_answer([], complete=False),
        bigquery_answer([("g6", "Compute Engine", "Spot Preemptible Nvidia L4 GPU running in Americas", 0.72, 0.0, "USD"),
                         ("g6", "Kubernetes Engine", "Zonal Kubernetes Clusters", 0.1, -0.1, "USD")]),
    ])
    with FakeGoogle(state) as google:
        code = billing.main(["--table", "lab-project.billing.gcp_billing_export_v1_0123", "--lab", "g6",
                             "--since", "2026-11-10", "--until", "2026-11-10"], client=google.client())
    out = capsys.readouterr().out
    assert code == 0
    assert "Spot Preemptible Nvidia L4 GPU" in out and re.search(r"total\s+0\.82\s+-0\.10\s+0\.72 USD", out)
    (post, poll) = state.calls
    assert post[0] == "POST" and post[1] == "/bigquery/v2/projects/lab-project/queries"
    body = post[3]
    assert body["useLegacySql"] is False and body["query"] == billing.render("lab-project.billing.gcp_billing_export_v1_0123", "bigquery")
    assert {p["name"]: p["parameterValue"]["value"] for p in body["queryParameters"]} == {
        "lab": "g6", "since": "2026-11-10T00:00:00+00:00", "until": "2026-11-11T00:00:00+00:00"}
    assert poll[0] == "GET" and poll[1].endswith("/queries/job_abc123") and poll[2]["location"] == "US"


def test_rows_from_bigquery_parses_nulls():
    (r,) = billing.rows_from_bigquery(bigquery_answer([("g6", "Compute Engine", "x", "1.5", None, "USD")]))
    assert r.cost == 1.5 and r.credits == 0.0
