"""What a lab actually cost, from the Cloud Billing export in BigQuery (standard usage cost table).

    python -m ops.billing --table PROJECT.DATASET.gcp_billing_export_v1_XXXXXX --lab g6 \
        --since 2026-11-01 [--until 2026-11-30] [--project JOB_PROJECT]

Cost is attributed by the `lab` label that every resource of a stack carries (GCE resource labels,
and GKE cost allocation's labels for in-cluster usage), grouped by service and SKU, with credits
(e.g. spot or free-tier credits, which are negative) shown beside gross cost.

One query template serves BigQuery and DuckDB (the local engine the tests run it on): the two
dialects differ only in how the table is quoted and how a named parameter is written.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ops.errors import OpsError
from ops.gcp import GcpClient

Dialect = Literal["bigquery", "duckdb"]
# Google's naming rules for the three parts of PROJECT_ID.DATASET.TABLE.
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_DATASET = re.compile(r"^[A-Za-z0-9_]{1,1024}$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_$-]{1,1024}$")
TABLE_EXAMPLE = "my-lab-project.billing.gcp_billing_export_v1_012345_6789AB_CDEF01"
LABEL_KEY = "lab"

QUERY_TEMPLATE = """\
SELECT
  (SELECT l.value FROM UNNEST(labels) AS l WHERE l.key = '{label_key}') AS lab,
  service.description AS service,
  sku.description AS sku,
  SUM(cost) AS cost,
  SUM(IFNULL((SELECT SUM(c.amount) FROM UNNEST(credits) AS c), 0)) AS credits,
  ANY_VALUE(currency) AS currency
FROM {table}
WHERE usage_start_time >= {p}since
  AND usage_start_time < {p}until
  AND EXISTS (SELECT 1 FROM UNNEST(labels) AS l WHERE l.key = '{label_key}' AND l.value = {p}lab)
GROUP BY lab, service, sku
ORDER BY cost DESC, service, sku
"""


class BillingError(OpsError):
    """Bad arguments or an unusable answer from BigQuery."""


class CostRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    lab: str
    service: str
    sku: str
    cost: float
    credits: float
    currency: str

    @property
    def net(self) -> float:
        return self.cost + self.credits


def check_table(table: str) -> None:
    """PROJECT_ID.DATASET.TABLE of the billing export, or a BillingError naming the part that is wrong."""
    parts = table.split(".")
    if len(parts) != 3:
        raise BillingError(
            f"--table {table!r}: expected PROJECT_ID.DATASET.TABLE of the billing export (three names joined "
            f"by dots), e.g. {TABLE_EXAMPLE}"
        )
    project, dataset, name = parts
    if not _PROJECT_ID.match(project):
        raise BillingError(
            f"--table {table!r}: {project!r} is not a project ID: 6-30 lowercase letters, digits or hyphens, "
            "starting with a letter and not ending with a hyphen (the ID, not the project's name or number: "
            "`gcloud projects list`)"
        )
    if not _DATASET.match(dataset):
        raise BillingError(
            f"--table {table!r}: {dataset!r} is not a dataset name: letters, digits and underscores "
            "(the dataset the billing export writes to)"
        )
    if not _TABLE_NAME.match(name):
        raise BillingError(
            f"--table {table!r}: {name!r} is not a table name: letters, digits, underscores and hyphens "
            "(the export's table is gcp_billing_export_v1_ followed by the billing account id)"
        )


def render(table: str, dialect: Dialect) -> str:
    """The query for one engine. `table` is PROJECT_ID.DATASET.TABLE (BigQuery) or a DuckDB table name."""
    if dialect == "bigquery":
        check_table(table)
        return QUERY_TEMPLATE.format(table=f"`{table}`", p="@", label_key=LABEL_KEY)
    return QUERY_TEMPLATE.format(table=f'"{table}"', p="$", label_key=LABEL_KEY)


def window(since: str, until: str | None) -> tuple[datetime, datetime]:
    """[since, until) in UTC from ISO dates or date-times; until defaults to now."""

    def parse(text: str) -> datetime:
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise BillingError(f"{text!r} is not an ISO date or date-time like 2026-11-01 or 2026-11-01T12:00") from None
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)

    start = parse(since)
    end = parse(until) if until else datetime.now(timezone.utc)
    if len(until or "") == 10:
        end += timedelta(days=1)  # a date as --until includes that whole day
    if end <= start:
        raise BillingError(f"empty window: --until {end.isoformat()} is not after --since {start.isoformat()}")
    return start, end


def rows_from_bigquery(response: dict) -> list[CostRow]:
    """jobs.query / getQueryResults rows ({"f": [{"v": ...}]}) in schema order, as CostRows."""
    names = [f["name"] for f in response["schema"]["fields"]]
    out = []
    for row in response.get("rows", []):
        values = dict(zip(names, (cell.get("v") for cell in row["f"])))
        out.append(
            CostRow(
                lab=values["lab"] or "",
                service=values["service"] or "",
                sku=values["sku"] or "",
                cost=float(values["cost"] or 0),
                credits=float(values["credits"] or 0),
                currency=values["currency"] or "",
            )
        )
    return out


def query_bigquery(client: GcpClient, job_project: str, table: str, lab: str, since: datetime, until: datetime,
                   poll_s: float = 2.0, deadline_s: float = 300.0) -> list[CostRow]:
    """Run the query with BigQuery's jobs.query (named parameters), polling until it completes."""
    body = {
        "query": render(table, "bigquery"),
        "useLegacySql": False,
        "parameterMode": "NAMED",
        "queryParameters": [
            {"name": "lab", "parameterType": {"type": "STRING"}, "parameterValue": {"value": lab}},
            *(
                {"name": name, "parameterType": {"type": "TIMESTAMP"}, "parameterValue": {"value": value.isoformat()}}
                for name, value in (("since", since), ("until", until))
            ),
        ],
        "timeoutMs": 30000,
    }
    response = client.request("POST", "bigquery", f"projects/{job_project}/queries", json=body)
    started = time.monotonic()
    while not response.get("jobComplete"):
        if time.monotonic() - started > deadline_s:
            raise BillingError(f"BigQuery job {response['jobReference']['jobId']} did not finish in {deadline_s:.0f} s")
        time.sleep(poll_s)
        ref = response["jobReference"]
        response = client.get("bigquery", f"projects/{ref['projectId']}/queries/{ref['jobId']}",
                              location=ref.get("location"), timeoutMs=30000)
    return rows_from_bigquery(response)


def report(rows: list[CostRow], lab: str, since: datetime, until: datetime) -> str:
    head = f"cost of lab {lab} from {since.isoformat()} to {until.isoformat()} (billing export)"
    if not rows:
        return f"{head}: no rows (the export lags by hours; check the window and that resources carry lab={lab})"
    currency = rows[0].currency
    lines = [head, f"{'service':<24} {'sku':<48} {'cost':>10} {'credits':>10} {'net':>10}"]
    lines += [f"{r.service[:24]:<24} {r.sku[:48]:<48} {r.cost:>10.2f} {r.credits:>10.2f} {r.net:>10.2f}" for r in rows]
    total, credits = sum(r.cost for r in rows), sum(r.credits for r in rows)
    lines.append(f"{'total':<73} {total:>10.2f} {credits:>10.2f} {total + credits:>10.2f} {currency}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, client: GcpClient | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.billing", description="A lab's cost from the billing export.")
    parser.add_argument(
        "--table", required=True, help=f"PROJECT_ID.DATASET.TABLE of the standard usage cost export, e.g. {TABLE_EXAMPLE}"
    )
    parser.add_argument("--lab", required=True, help="the lab label value, e.g. g6")
    parser.add_argument("--since", required=True, help="start (ISO date or date-time, UTC unless given)")
    parser.add_argument("--until", help="end, exclusive (a date includes that whole day); default now")
    parser.add_argument("--project", help="project that runs the query job (default: the table's project)")
    args = parser.parse_args(argv)
    try:
        since, until = window(args.since, args.until)
        check_table(args.table)  # before any call
        with client or GcpClient.from_environment() as gcp:
            rows = query_bigquery(gcp, args.project or args.table.split(".")[0], args.table, args.lab, since, until)
    except OpsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report(rows, args.lab, since, until))
    return 0


if __name__ == "__main__":
    sys.exit(main())
