"""Specification of Kubernetes quantity parsing (enough to compare requests with limits)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from craft_operator.builders.quantities import (
    canonical_quantity,
    canonical_resources,
    overcommit_problem,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("0", Decimal(0)),
        ("250n", Decimal("250e-9")),
        ("250u", Decimal("250e-6")),
        ("500m", Decimal("0.5")),
        ("2k", Decimal(2000)),
        ("2M", Decimal(2_000_000)),
        ("2G", Decimal(2 * 10**9)),
        ("2T", Decimal(2 * 10**12)),
        ("2P", Decimal(2 * 10**15)),
        ("2E", Decimal(2 * 10**18)),
        ("2Ki", Decimal(2 * 2**10)),
        ("2Mi", Decimal(2 * 2**20)),
        ("2Gi", Decimal(2 * 2**30)),
        ("2Ti", Decimal(2 * 2**40)),
        ("2Pi", Decimal(2 * 2**50)),
        ("2Ei", Decimal(2 * 2**60)),
    ],
)
def test_every_suffix_scales_the_number(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.5", Decimal("0.5")),
        ("1.5Gi", Decimal("1.5") * 2**30),
        (".5", Decimal("0.5")),
        ("+2", Decimal(2)),
        ("-2", Decimal(-2)),
        (" 2Gi ", Decimal(2 * 2**30)),
    ],
)
def test_decimals_signs_and_surrounding_space_are_accepted(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e3", Decimal(1000)), ("1E3", Decimal(1000)), ("5e-3", Decimal("0.005")), ("2e+2", 200)],
)
def test_decimal_exponents_are_accepted(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (str(0.7 + 0.2 + 0.1), Decimal(1)),  # 0.9999999999999999: a float's sum
        ("2.9999999999", Decimal(3)),
        ("1.0000000001", Decimal("1.000000001")),
        ("0.1n", Decimal("1e-9")),
        ("1e-20", Decimal("1e-9")),
        ("0.0000000001Ki", Decimal("0.000000103")),
        ("-0.0000000001", Decimal("-1e-9")),  # away from zero, as Kubernetes rounds
        ("0.00000000000", Decimal(0)),
    ],
)
def test_a_quantity_finer_than_a_nano_is_rounded_up_to_one_as_kubernetes_reads_it(
    text: str, value: Decimal
) -> None:
    assert parse_quantity(text) == value


def test_a_bare_capital_e_is_the_exa_suffix_not_an_exponent() -> None:
    assert parse_quantity("1E") == Decimal(10**18)


def test_an_integer_is_taken_as_is() -> None:
    assert parse_quantity(3) == Decimal(3)


def test_quantities_compare_across_suffixes() -> None:
    assert parse_quantity("1Gi") > parse_quantity("1G")
    assert parse_quantity("1000m") == parse_quantity("1")
    assert parse_quantity("1024Mi") == parse_quantity("1Gi")


@pytest.mark.parametrize(
    "text", ["", " ", "Gi", "2 Gi", "2gi", "2KI", "2Xi", "two", "1.2.3", ".", "2i", "--1", "1e"]
)
def test_anything_else_is_a_value_error_naming_the_input(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    "text",
    ["1e999999999", "9223372036854775808", "10E", "8Ei", "-1e30", "1e19", 2**63],
)
def test_a_quantity_larger_than_kubernetes_allows_is_refused_not_overflowed(
    text: str | int,
) -> None:
    with pytest.raises(ValueError, match=r"larger than Kubernetes allows \(2\^63-1\)"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["0e20", "0e999", "0.0e999", "00e100", "-0E+999"])
def test_a_zero_with_any_exponent_is_zero_as_the_api_server_stores_it(text: str) -> None:
    assert parse_quantity(text) == 0
    assert canonical_resources({"limits": {"memory": text}}) == {"limits": {"memory": "0"}}


@pytest.mark.parametrize("text", ["9223372036854775807", "7Ei", "9e18"])
def test_the_largest_quantities_kubernetes_allows_parse(text: str) -> None:
    assert parse_quantity(text) <= 2**63 - 1


#: Quantities as written, and as the API server stores them (the cluster tier checks these
#: against the real server: tests/cluster/test_pod_shape.py).
CANONICAL = {
    "0.5": "500m",
    "500m": "500m",
    "1000m": "1",
    "1.5": "1500m",
    "0.1": "100m",
    "1500": "1500",
    "2000M": "2G",
    "2G": "2G",
    "0": "0",
    "0e999": "0",
    "2048Mi": "2Gi",
    "1.5Gi": "1536Mi",
    "1024Ki": "1Mi",
    "1023Mi": "1023Mi",
    "512Mi": "512Mi",
}


@pytest.mark.parametrize(("text", "stored"), CANONICAL.items())
def test_a_quantity_has_one_canonical_form_as_the_api_server_stores_it(
    text: str, stored: str
) -> None:
    assert canonical_quantity(text) == stored


#: Quantities finer than a thousandth, as the API server stores them: rounded up.
CANONICAL_STORED = {**CANONICAL, "250n": "1m", "1500u": "2m", "1001m": "1001m"}


@pytest.mark.parametrize("resource", ["cpu", "memory", "ephemeral-storage"])
@pytest.mark.parametrize(("text", "stored"), CANONICAL_STORED.items())
def test_every_resource_is_rounded_up_to_whole_thousandths(
    resource: str, text: str, stored: str
) -> None:
    assert canonical_resources({"requests": {resource: text}}) == {"requests": {resource: stored}}


#: Equal values in every spelling, and their one form by value.
BY_VALUE = {
    "4Gi": ["4Gi", "4096Mi", "4294967296", "4294967296000m"],
    "2G": ["2G", "2000M", "1953125Ki", "2e9"],
    "1536Mi": ["1.5Gi", "1610612736", "1536Mi"],
    "500m": ["0.5", "500m", "500000u"],
    "1500": ["1500", "1.5k"],
    "1Ki": ["1024", "1Ki"],
}


@pytest.mark.parametrize(("form", "spellings"), BY_VALUE.items())
def test_a_quantity_by_value_has_one_form_however_it_is_spelled(
    form: str, spellings: list[str]
) -> None:
    assert {canonical_quantity(text, by_value=True) for text in spellings} == {form}


def test_text_that_is_no_quantity_is_left_as_it_is() -> None:
    assert canonical_quantity("two") == "two"


@pytest.mark.parametrize(
    ("resource", "problem"),
    [
        ("nvidia.com/gpu", True),
        ("hugepages-2Mi", True),
        ("example.kubernetes.io/widget", False),  # native to Kubernetes: overcommitted
        ("kubernetes.io/widget", False),
        ("memory", False),
    ],
)
def test_only_devices_and_hugepages_must_request_their_limit(resource: str, problem: bool) -> None:
    assert (overcommit_problem(resource, "2Mi", "4Mi") is not None) is problem


@pytest.mark.parametrize(
    ("resource", "limit", "said"),
    [
        ("hugepages-2Mi", "3Mi", "(3Mi) must be a whole number of pages, a multiple of 2Mi"),
        ("hugepages-1Gi", "1536Mi", "a multiple of 1Gi"),
        ("hugepages-2Mi", "4194305", "a multiple of 2Mi"),
        ("hugepages-1.5", "3", "hugepages-1.5 names no page size"),
        ("hugepages-0", "0", "hugepages-0 names no page size"),
    ],
)
def test_part_of_a_huge_page_is_a_problem_as_the_pod_api_says(
    resource: str, limit: str, said: str
) -> None:
    assert said in (overcommit_problem(resource, None, limit) or "")


@pytest.mark.parametrize("limit", ["4Mi", "0", "2097151.5", "6291456"])
def test_whole_huge_pages_are_no_problem(limit: str) -> None:
    # 2097151.5 too: the pod API rounds it up to a whole byte, a page, first.
    assert overcommit_problem("hugepages-2Mi", None, limit) is None
