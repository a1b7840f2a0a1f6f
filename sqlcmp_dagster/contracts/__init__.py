"""Output contracts of the layer assets: pandera (polars) models and the blocking asset checks built from them."""

from sqlcmp_dagster.contracts.checks import CONTRACT_CHECK, contract_check, contract_spec
from sqlcmp_dagster.contracts.schemas import SCHEMAS

__all__ = ["CONTRACT_CHECK", "SCHEMAS", "contract_check", "contract_spec"]
