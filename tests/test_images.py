"""Image references: parsing, as the lock, the engine and push read them."""

from __future__ import annotations

import pytest

from imagebuild.images import is_loopback_registry, normalize_image_id, split_reference


@pytest.mark.parametrize(("ref", "expected"), [
    ("imagebuild/rocm:7.0.2", ("imagebuild/rocm", "7.0.2")),
    ("127.0.0.1:5000/imagebuild/rocm:abc", ("127.0.0.1:5000/imagebuild/rocm", "abc")),
    ("127.0.0.1:5000/imagebuild/rocm", ("127.0.0.1:5000/imagebuild/rocm", None)),
    ("rocm@sha256:" + "a" * 64, ("rocm@sha256:" + "a" * 64, None)),
])
def test_split_reference(ref, expected):
    assert split_reference(ref) == expected


def test_image_ids_carry_their_algorithm():
    assert normalize_image_id("abc123\n") == "sha256:abc123"
    assert normalize_image_id("sha256:abc123") == "sha256:abc123"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1:5000", True), ("localhost", True), ("[::1]:5000", True),
    ("127.1.2.3", True), ("registry.example.org:5000", False), ("10.0.0.1", False),
])
def test_loopback_registries(host, loopback):
    assert is_loopback_registry(host) is loopback
