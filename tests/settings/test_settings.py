"""accelerate_graph.settings: the registry, resolve's order, the recorded and the current settings."""

from __future__ import annotations

import pytest

from accelerate_graph import settings
from accelerate_graph.common.errors import BadOptionError
from accelerate_graph.settings import DEFAULTS


def test_every_setting_has_a_parsable_default_and_a_reason():
    for setting in settings.REGISTRY:
        assert setting.why and setting.allowed
        assert setting.parse(settings.as_text(setting.default)) == setting.default, setting.name
        assert getattr(DEFAULTS, setting.name) == setting.default


def test_resolve_takes_defaults_then_the_plan_then_the_environment_then_set():
    recorded = {"pdl": False, "mask_kernel": False, "smem_carveout": "50"}
    environ = {"CUGRAPH_ACCEL_MASK_KERNEL": "on", "CUGRAPH_ACCEL_SMEM_CARVEOUT": "off", "PATH": "/bin"}
    resolved = settings.resolve({"smem_carveout": "20"}, recorded=recorded, environ=environ)
    assert resolved.pdl is False  # the plan's, nothing later sets it
    assert resolved.mask_kernel is True  # the environment over the plan
    assert resolved.smem_carveout == "20"  # --set over both
    assert resolved.rotary_table is DEFAULTS.rotary_table  # the default: nobody sets it
    assert settings.resolve(environ={}) == DEFAULTS


def test_values_are_parsed_and_normalised():
    resolved = settings.resolve(
        {"skinny-batches": "gate_up, proj", "lm_head_kernel": "1", "attention_preloaded": "8", "pdl": "0"}, environ={}
    )
    assert resolved.skinny_batches == "proj,gate_up"  # the ops in their own order
    assert resolved.lm_head_kernel == "on" and resolved.attention_preloaded == 8 and resolved.pdl is False


@pytest.mark.parametrize(
    "name, text", [("attention_preloaded", "3"), ("attention_preloaded_batch", "0"), ("skinny_batches", "qkv")]
)
def test_a_bad_value_is_one_error_naming_the_setting_and_its_values(name, text):
    with pytest.raises(BadOptionError, match=rf"^assignments sets {name} to '{text}', which is not .* Use one of: "):
        settings.resolve({name: text}, environ={})


def test_process_variables_are_not_settings_but_a_typo_is_an_error():
    assert settings.resolve(environ={"CUGRAPH_ACCEL_TP_WORKER": "1", "CUGRAPH_ACCEL_FULL_ZOO": "1"}) == DEFAULTS
    with pytest.raises(BadOptionError, match=r"^The environment variable CUGRAPH_ACCEL_PDLL names no setting 'pdll'"):
        settings.resolve(environ={"CUGRAPH_ACCEL_PDLL": "0"})
    with pytest.raises(BadOptionError, match=r"a setting since renamed 'inductor_tuning'\. Use CUGRAPH_ACCEL_INDUCTOR"):
        settings.resolve(environ={"CUGRAPH_ACCEL_TUNE": "1"})


def test_recorded_leaves_out_debug_and_differing_lists_the_changes():
    changed = DEFAULTS.replace(pdl=False, debug=True)
    assert "debug" not in changed.recorded() and changed.recorded()["pdl"] is False
    assert changed.differing() == {"pdl": False}
    assert settings.summary(changed) == "pdl off" and settings.summary(DEFAULTS) == "defaults"


def test_describe_difference_names_only_what_changed():
    made_with = DEFAULTS.replace(pdl=False).recorded()
    assert settings.describe_difference(made_with, DEFAULTS.replace(pdl=False)) is None
    line = settings.describe_difference(made_with, DEFAULTS.replace(smem_carveout="off"))
    assert line == "this plan was made under other settings; this run uses: pdl off -> on, smem_carveout auto -> off"


def test_to_environment_gives_another_process_the_same_settings():
    chosen = DEFAULTS.replace(pdl=False, skinny_batches="proj", attention_preloaded=2)
    assert settings.resolve(environ=settings.to_environment(chosen)) == chosen
    assert settings.to_environment(chosen, names=["pdl"]) == {"CUGRAPH_ACCEL_PDL": "off"}


def test_use_and_scope_set_the_current_settings_for_a_while():
    assert settings.current() is DEFAULTS
    chosen = DEFAULTS.replace(mask_kernel=False)
    with settings.use(chosen):
        assert settings.current() is chosen
    with settings.scope():
        settings.enter(chosen)
        assert settings.current() is chosen
    assert settings.current() is DEFAULTS


def test_set_assignments_are_name_equals_value():
    assert settings.parse_assignments(["pdl=off", " mask_kernel = on"]) == {"pdl": "off", "mask_kernel": " on"}
    with pytest.raises(BadOptionError, match=r"^assignments 'pdl' is not NAME=VALUE\."):
        settings.parse_assignments(["pdl"])
