"""The public API documents itself: help() is a user's first reference."""

import inspect
import pydoc

import pytest

import simfs


def _public_members():
    for name in simfs.__all__:
        obj = getattr(simfs, name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            if attr.startswith("_"):
                continue
            function = value.fget if isinstance(value, property) else getattr(
                value, "__func__", value)
            if callable(function) or isinstance(value, property):
                yield f"{name}.{attr}", function


@pytest.mark.parametrize("qualified, function", list(_public_members()),
                         ids=[name for name, _ in _public_members()])
def test_every_public_method_and_property_has_a_docstring(qualified, function):
    assert (function.__doc__ or "").strip(), qualified


def test_help_on_world_tells_a_user_about_the_server_view_and_the_trace():
    text = pydoc.render_doc(simfs.World, renderer=pydoc.plaintext)
    assert "w.server" in text and "w.trace" in text
    assert "check=False" in text and "ProcessFailed" in text


@pytest.mark.parametrize("name", ["spawn_thread", "delayed_close", "next_ofd_id", "pid_alive",
                                  "next_object_serial"])
def test_internal_plumbing_is_not_public_api(name):
    assert not hasattr(simfs.World, name)


@pytest.mark.parametrize("name", ["wait_token", "joiners"])
def test_scheduler_bookkeeping_is_not_public_on_process(name):
    assert name not in simfs.Process.__slots__


def test_compute_is_public_and_tells_a_user_what_it_charges_and_when_it_refuses():
    assert "compute" in simfs.__all__
    text = pydoc.render_doc(simfs.compute, renderer=pydoc.plaintext)
    assert "virtual time" in text and "outside a simulated" in text


def test_help_on_world_tells_a_user_the_link_its_default_and_how_to_turn_it_off():
    text = pydoc.render_doc(simfs.World, renderer=pydoc.plaintext)
    assert 'link: the rate' in text and '"10Gbit/s"' in text and "None: data moves" in text
