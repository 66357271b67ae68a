"""One test per compat function, against the installed torch and transformers: each fails naming the
upstream symbol when an upgrade removes it or changes what we rely on."""

from __future__ import annotations

import contextlib
import inspect

import pytest
import torch
import transformers
from tiny_models import tiny_decoder
from torch.overrides import TorchFunctionMode
from transformers import AutoConfig, AutoModelForCausalLM, StaticCache
from transformers.cache_utils import StaticLayer

from accelerate_graph.compat import torch_internals as ti
from accelerate_graph.compat import transformers_internals as hf

aten = torch.ops.aten


@contextlib.contextmanager
def upstream(symbol: str, checked: str):
    """Turns the error an upgrade would raise into a failure that names the symbol."""
    try:
        yield
    except (AttributeError, ImportError, KeyError, TypeError, RuntimeError) as err:
        pytest.fail(f"{symbol} is gone or changed (checked on {checked}): {type(err).__name__}: {err}")


def expect(condition: bool, symbol: str, checked: str, what: str) -> None:
    if not condition:
        pytest.fail(f"{symbol} changed (checked on {checked}): {what}")


class _Seen(ti.DispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


class _SeenFunctions(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


# --- torch ---------------------------------------------------------------------------------------------

TORCH = ti.CHECKED


def test_dispatch_mode_sees_aten_ops():
    symbol = "torch.utils._python_dispatch.TorchDispatchMode"
    with upstream(symbol, TORCH):
        with _Seen() as seen:
            torch.ones(2) + 1
    expect(aten.add.Tensor in seen.ops, symbol, TORCH, f"a subclass saw {seen.ops}, not aten.add.Tensor")


def test_pytree_leaves_in_order():
    symbol = "torch.utils._pytree.tree_flatten"
    tensor = torch.zeros(1)
    with upstream(symbol, TORCH):
        leaves = ti.pytree_leaves(((1, [tensor]), {"a": 2.0}, None))
    expect(leaves[:3] == [1, tensor, 2.0], symbol, TORCH, f"leaves {leaves}")


def test_dispatch_modes_disabled_hides_ops_from_an_active_mode():
    symbol = "torch.utils._python_dispatch._disable_current_modes"
    with upstream(symbol, TORCH):
        with _Seen() as seen:
            with ti.dispatch_modes_disabled():
                torch.ones(2).mul(3)
    expect(aten.mul.Tensor not in seen.ops, symbol, TORCH, "the active mode still saw aten.mul")


def test_torch_function_disabled_hides_calls_from_a_function_mode():
    symbol = "torch._C.DisableTorchFunction"
    a = torch.ones(2)
    with upstream(symbol, TORCH):
        with _SeenFunctions() as seen:
            with ti.torch_function_disabled():
                torch.equal(a, a)
            torch.equal(a, a)
    expect(
        seen.calls.count(torch.equal) == 1, symbol, TORCH, f"the mode saw torch.equal {seen.calls.count(torch.equal)}x"
    )


def test_tensor_version_counts_in_place_writes_only():
    symbol = "torch.Tensor._version"
    tensor = torch.zeros(3)
    with upstream(symbol, TORCH):
        start = ti.tensor_version(tensor)
        tensor + 1
        same = ti.tensor_version(tensor)
        tensor.add_(1)
        after = ti.tensor_version(tensor)
    expect(isinstance(start, int) and same == start and after > start, symbol, TORCH, f"{start}, {same}, {after}")


def test_op_is_mutable():
    symbol = "torch._ops.OpOverload._schema.is_mutable"
    with upstream(symbol, TORCH):
        found = [ti.op_is_mutable(op) for op in (aten.add_.Tensor, aten.copy_.default, aten.add.Tensor)]
    expect(found == [True, True, False], symbol, TORCH, f"add_/copy_/add gave {found}")


def test_forwards_replaced_shadows_the_class_forward_for_the_duration():
    symbol = "torch.nn.Module._call_impl (per-call lookup of self.forward)"
    module = torch.nn.Linear(2, 2)
    calls = []
    module.register_forward_hook(lambda *_: calls.append("hook"))
    with ti.forwards_replaced({module: lambda x: x * 0 + 7}):
        replaced = module(torch.ones(1, 2))
    expect(bool((replaced == 7).all()), symbol, TORCH, "an instance `forward` does not replace the class's")
    expect(calls == ["hook"], symbol, TORCH, "hooks no longer run around an instance `forward`")
    expect("forward" not in vars(module), symbol, TORCH, "the instance attribute was left behind")
    expect(not bool((module(torch.ones(1, 2)) == 7).all()), symbol, TORCH, "the class forward did not come back")


def _compile_count(fn, *inputs) -> int:
    torch.compiler.reset()
    compiled = torch.compile(fn, backend="eager", dynamic=None)
    before = ti.dynamo_graph_count()
    for x in inputs:
        compiled(x)
    return ti.dynamo_graph_count() - before


def test_dynamo_graph_count_counts_each_graph():
    symbol = 'torch._dynamo.utils.counters["stats"]["unique_graphs"]'
    with upstream(symbol, TORCH):
        made = _compile_count(lambda x: x * 2, torch.ones(3))
    expect(made == 1, symbol, TORCH, f"one compiled function counted {made} graphs")


def test_add_to_each_adds_in_place_to_every_tensor_of_the_list():
    symbol = "torch._foreach_add_(list of tensors, int)"
    positions = [torch.tensor(3), torch.tensor(5), torch.tensor([7])]
    objects = [id(t) for t in positions]
    with upstream(symbol, TORCH):
        ti.add_to_each(positions, 1)
    expect([int(t) for t in positions] == [4, 6, 8], symbol, TORCH, f"got {positions}")
    expect([id(t) for t in positions] == objects, symbol, TORCH, "not in place")


def test_copy_each_writes_every_destination_view_in_place():
    symbol = "torch._foreach_copy_(list of tensors, list of tensors)"
    ids, positions = torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 1, dtype=torch.long)
    tokens = torch.tensor([5, 6], dtype=torch.int32)  # another dtype: copied and converted like copy_
    with upstream(symbol, TORCH):
        ti.copy_each([ids[:2, 0], positions[:2, 0]], [tokens, torch.arange(10)[::3][1:3]])
    expect(ids[:, 0].tolist() == [5, 6, 0, 0], symbol, TORCH, f"the first destination holds {ids[:, 0].tolist()}")
    expect(positions[:, 0].tolist() == [3, 6, 0, 0], symbol, TORCH, f"the second holds {positions[:, 0].tolist()}")


def test_maybe_mark_dynamic_makes_one_graph_serve_two_sizes():
    symbol = "torch._dynamo.maybe_mark_dynamic"
    a, b = torch.ones(2, 3), torch.ones(5, 3)
    with upstream(symbol, TORCH):
        for tensor in (a, b):
            ti.maybe_mark_dynamic(tensor, 0)
        made = _compile_count(lambda x: x.sum(0) * x.shape[0], a, b)
    expect(made == 1, symbol, TORCH, f"two sizes marked dynamic took {made} graphs")


def test_mark_static_address_is_accepted_by_a_compiled_call():
    symbol = "torch._dynamo.mark_static_address"
    tensor = torch.zeros(3)
    with upstream(symbol, TORCH):
        ti.mark_static_address(tensor)
        made = _compile_count(lambda x: x.add_(1), tensor)
    expect(made == 1 and bool((tensor == 1).all()), symbol, TORCH, "a marked tensor did not compile and run")


def test_cudagraph_skip_count_reads_the_counter_inductor_bumps():
    symbol = 'torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]'
    with upstream("torch._inductor.cudagraph_utils.log_cudagraph_skip_and_bump_counter", TORCH):
        from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

        before = ti.cudagraph_skip_count()
        log_cudagraph_skip_and_bump_counter("compat test: a counted skip")
        after = ti.cudagraph_skip_count()
    expect(after == before + 1, symbol, TORCH, f"inductor's skip did not reach it ({before} -> {after})")


def test_recompile_limit_at_least_raises_and_restores_it():
    symbol = "torch._dynamo.config.recompile_limit"
    import torch._dynamo.config as config

    with upstream(symbol, TORCH):
        start = config.recompile_limit
        with ti.recompile_limit_at_least(start + 50):
            inside = config.recompile_limit
        after = config.recompile_limit
    expect(inside == start + 50 and after == start, symbol, TORCH, f"{start} -> {inside} -> {after}")


def test_inductor_config_patched_with_the_fused_settings():
    from accelerate_graph.fused.layers import INDUCTOR_SETTINGS as SHIPPED
    from accelerate_graph.fused.layers import PDL_SETTINGS, TUNE_SETTINGS

    # large models (or the setting inductor_tuning on) add tuning, Hopper GPUs PDL
    INDUCTOR_SETTINGS = {**SHIPPED, **TUNE_SETTINGS, **PDL_SETTINGS}
    symbol = f"torch._inductor.config.patch({INDUCTOR_SETTINGS})"
    import torch._inductor.config as config

    def read(key: str):
        owner, _, name = key.rpartition(".")
        return getattr(getattr(config, owner) if owner else config, name)

    with upstream(symbol, TORCH):
        before = {key: read(key) for key in INDUCTOR_SETTINGS}
        with ti.inductor_config_patched(INDUCTOR_SETTINGS):
            inside = {key: read(key) for key in INDUCTOR_SETTINGS}
        after = {key: read(key) for key in INDUCTOR_SETTINGS}
    expect(inside == INDUCTOR_SETTINGS and after == before, symbol, TORCH, f"{before} -> {inside} -> {after}")


def test_warm_compile_workers(monkeypatch):
    symbol = "torch._inductor.async_compile.maybe_warm_pool"
    monkeypatch.setenv("TORCH_WARM_POOL", "0")  # the call, without starting worker processes in a test
    with upstream(symbol, TORCH):
        from torch._inductor.async_compile import maybe_warm_pool

        required = [p for p in inspect.signature(maybe_warm_pool).parameters.values() if p.default is p.empty]
        ti.warm_compile_workers()
    expect(not required, symbol, TORCH, f"it now requires {[p.name for p in required]}")


def test_reset_cudagraph_trees():
    with upstream("torch._inductor.cudagraph_trees.reset_cudagraph_trees", TORCH):
        ti.reset_cudagraph_trees()


def test_inductor_decompositions_replaced_reaches_the_table_inductor_selects():
    symbol = "torch._inductor.decomposition.decompositions (and fast_random_decomps())"
    with upstream(symbol, TORCH):
        from torch._inductor.decomposition import select_decomp_table

        original = select_decomp_table().get(aten.mm.default)
        seen = []

        def maker(inner):
            seen.append(inner)
            return lambda a, b: NotImplemented

        with ti.inductor_decompositions_replaced({aten.mm.default: maker}):
            inside = select_decomp_table().get(aten.mm.default)
        after = select_decomp_table().get(aten.mm.default)
    expect(inside is not original and seen and seen[0] is original, symbol, TORCH, "inductor's table kept its own mm")
    expect(after is original, symbol, TORCH, "inductor's own mm decomposition was not restored")


def test_inductor_cache_tagged_keys_a_graph_pass_and_keeps_a_users():
    symbol = "torch._inductor.config.post_grad_custom_post_pass / custom_graph_pass.CustomGraphPass"
    with upstream(symbol, TORCH):
        import torch._inductor.config as config
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class Users(CustomGraphPass):
            calls = 0

            def __call__(self, graph):
                Users.calls += 1

            def uuid(self):
                return "users"

        with ti.inductor_cache_tagged(("tag", 1)):
            alone = config.post_grad_custom_post_pass
            alone_uuid = alone.uuid()
        with config.patch(post_grad_custom_post_pass=Users()):
            with ti.inductor_cache_tagged(("tag", 1)):
                config.post_grad_custom_post_pass(torch.fx.Graph())
                with_users = config.post_grad_custom_post_pass.uuid()
        after = config.post_grad_custom_post_pass
    expect(isinstance(alone, CustomGraphPass), symbol, TORCH, "the tag is not a CustomGraphPass")
    expect("tag" in alone_uuid and "users" in with_users and alone_uuid != with_users, symbol, TORCH, "uuids")
    expect(Users.calls == 1 and after is None, symbol, TORCH, "the user's pass did not run, or was not restored")


def test_statically_known_true():
    symbol = "torch.fx.experimental.symbolic_shapes.statically_known_true"
    with upstream(symbol, TORCH):
        found = (ti.statically_known_true(1 == 1), ti.statically_known_true(1 == 2))
    expect(found == (True, False), symbol, TORCH, f"gave {found}")


def test_inductor_materialized_writes_the_value_to_a_buffer():
    symbol = "torch.ops.prims.inductor_force_stride_order"
    from torch._inductor.utils import run_and_get_code

    def gemv(gate, up, weight, materialize):  # the batch-1 down_proj as gemv_lowering decomposes it
        act = torch.nn.functional.silu(gate) * up
        act = ti.inductor_materialized(act) if materialize else act
        return (act.unsqueeze(2).float() * weight.unsqueeze(0).float()).sum(dim=1).to(act.dtype)

    bf16 = torch.bfloat16
    gate, up, weight = (
        torch.randn(1, 512, dtype=bf16),
        torch.randn(1, 512, dtype=bf16),
        torch.randn(512, 64, dtype=bf16),
    )
    runs = []
    with upstream(symbol, TORCH):
        for materialize in (False, True):
            torch.compiler.reset()
            runs.append(run_and_get_code(torch.compile(gemv, backend="inductor"), gate, up, weight, materialize))
        torch.compiler.reset()
    expected = gemv(gate, up, weight, False)
    for result, _ in runs:
        expect(
            torch.allclose(result.float(), expected.float(), rtol=2e-2, atol=0.2), symbol, TORCH, "the value changed"
        )
    # materialized: act is stored as itself (bf16, its own shape) before the sum reads it
    act_buffer = "((1, 512), (512, 1), torch.bfloat16)"
    stored = [any(act_buffer in code for code in codes) for _, codes in runs]
    expect(stored == [False, True], symbol, TORCH, f"act stored as a bf16 buffer (inlined, materialized): {stored}")


def test_cuda_memory_history_symbols_exist():
    """Needs CUDA to run; the symbols (and the history call's keywords) must be there on every torch."""
    import inspect

    symbol = "torch.cuda.memory._record_memory_history / _snapshot"
    with upstream(symbol, TORCH):
        record = torch.cuda.memory._record_memory_history
        snapshot = torch.cuda.memory._snapshot
    expect("max_entries" in inspect.signature(record).parameters, symbol, TORCH, "no max_entries keyword")
    expect(callable(snapshot), symbol, TORCH, "no snapshot function")


# --- transformers --------------------------------------------------------------------------------------

HF = hf.CHECKED


def test_attention_implementation_follows_set_attn_implementation():
    symbol = "transformers.PreTrainedConfig._attn_implementation"
    model = tiny_decoder("llama")
    with upstream(symbol, HF):
        loaded = hf.attention_implementation(model.config)
        model.set_attn_implementation("eager")
        switched = hf.attention_implementation(model.config)
    expect((loaded, switched) == ("sdpa", "eager"), symbol, HF, f"read {loaded!r}, then {switched!r}")


def test_attention_softcap_reads_gemma2s_config_attribute():
    symbol = "transformers.Gemma2Config.attn_logit_softcapping"
    from transformers import AutoConfig

    with upstream(symbol, HF):
        gemma2, llama = AutoConfig.for_model("gemma2"), AutoConfig.for_model("llama")
        read = hf.attention_softcap(gemma2), hf.attention_softcap(llama)
    expect(read[0] == gemma2.attn_logit_softcapping == 50.0 and read[1] is None, symbol, HF, f"read {read}")


def test_attention_implementations_keys_match_set_attn_implementation():
    symbol = "transformers.PreTrainedConfig.sub_configs / ._attn_implementation"
    with upstream(symbol, HF):
        config = AutoConfig.for_model("gemma3")

        class Holder:
            pass

        holder = Holder()
        holder.config = config
        found = hf.attention_implementations(holder)
        plain = hf.attention_implementations(tiny_decoder("llama"))
    expect({"", "text_config", "vision_config"} <= set(found), symbol, HF, f"gemma3's configs keyed {sorted(found)}")
    expect(plain == {"": "sdpa"}, symbol, HF, f"a llama model gave {plain}")


def _allocated_layer() -> StaticLayer:
    config = AutoConfig.for_model("llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
    cache = StaticCache(config=config, max_cache_len=16)
    layer = cache.layers[0]
    keys, values = torch.randn(3, 2, 2, 16), torch.randn(3, 2, 2, 16)
    layer.update(keys, values)
    return layer


def test_static_layer_view_shares_memory_position_and_every_attribute():
    symbol = "transformers.cache_utils.StaticLayer (constructor, lazy_initialization's attributes)"
    with upstream(symbol, HF):
        layer = _allocated_layer()
        view = hf.static_layer_view(layer, 2, 8)
        missing = sorted(set(vars(layer)) - set(vars(view)))
        expect(not missing, symbol, HF, f"a layer now carries {missing}, which static_layer_view does not set")
        expect(view.keys.shape == (2, 2, 8, 16) and view.keys.data_ptr() == layer.keys.data_ptr(), symbol, HF, "keys")
        expect(view.cumulative_length is layer.cumulative_length, symbol, HF, "cumulative_length is not shared")
        expect((view.batch_size, view.max_cache_len, view.is_initialized) == (2, 8, True), symbol, HF, "sizes")
        keys, values = torch.ones(2, 2, 1, 16), torch.ones(2, 2, 1, 16)
        view.update(keys, values)  # slot 2, after the 2 prompt tokens
    expect(bool((layer.keys[:2, :, 2] == 1).all()) and int(layer.cumulative_length) == 3, symbol, HF, "update")


def test_static_layer_write_is_update_without_the_advance():
    symbol = "transformers.cache_utils.StaticLayer.update (slot = cumulative_length, then add_)"
    with upstream(symbol, HF):
        theirs, ours = _allocated_layer(), _allocated_layer()
        ours.keys.copy_(theirs.keys), ours.values.copy_(theirs.values)  # the same prompt in both
        expect(hf.writes_like_static_layer(ours), symbol, HF, "a StaticLayer no longer writes with update")
        keys, values = torch.randn(3, 2, 1, 16), torch.randn(3, 2, 1, 16)
        expected = theirs.update(keys, values)
        written = hf.static_layer_write(ours, keys, values)
    moved = int(hf.static_layer_position(theirs)) - int(hf.static_layer_position(ours))
    expect(moved == 1, symbol, HF, f"update advanced the position by {moved} more than our write, not 1")
    same = all(torch.equal(a, b) for a, b in zip(written, expected))
    expect(same and torch.equal(ours.keys, theirs.keys), symbol, HF, "update writes another slot than the position")


def test_static_layer_tensors_are_what_update_writes_and_returns():
    symbol = "transformers.cache_utils.StaticLayer.keys / .values / .cumulative_length"
    with upstream(symbol, HF):
        layer = _allocated_layer()
        keys, values, slot = hf.static_layer_tensors(layer)
        at = int(slot)
        new_keys, new_values = torch.randn(3, 2, 1, 16), torch.randn(3, 2, 1, 16)
        returned = layer.update(new_keys, new_values)
    expect(returned[0] is keys and returned[1] is values, symbol, HF, "update returns other tensors than the layer's")
    written = torch.equal(keys[:, :, at : at + 1], new_keys) and torch.equal(values[:, :, at : at + 1], new_values)
    expect(written, symbol, HF, "update writes another slot than cumulative_length")


def test_cache_indices_and_setting_them_to_zero():
    symbol = "transformers.models.llama.modeling_llama.LlamaAttention.layer_idx"
    model = tiny_decoder("llama")
    layer = model.model.layers[1]
    with upstream(symbol, HF):
        found = hf.cache_indices(layer)
        with hf.cache_indices_set_to_zero(layer):
            inside = layer.self_attn.layer_idx
    expect(found == [(layer.self_attn, "layer_idx", 1)], symbol, HF, f"found {found}")
    expect(inside == 0 and layer.self_attn.layer_idx == 1, symbol, HF, "not set to 0, or not restored")


def test_cache_indices_of_gpt_neo():
    symbol = "transformers.models.gpt_neo.modeling_gpt_neo.GPTNeoSelfAttention.layer_id"
    config = AutoConfig.for_model(
        "gpt_neo", hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]], vocab_size=64
    )
    model = AutoModelForCausalLM.from_config(config)
    with upstream(symbol, HF):
        names = {name for _, name, _ in hf.cache_indices(model.transformer.h[1])}
    expect("layer_id" in names, symbol, HF, f"GPT-Neo's layer names its slot with {names}")


def test_causal_lm_class_names():
    symbol = "transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"
    with upstream(symbol, HF):
        names = hf.causal_lm_class_names()
        llama = names["llama"]
    expect(llama == "LlamaForCausalLM" and hasattr(transformers, llama), symbol, HF, f"llama -> {llama}")


def test_modeling_module_defines():
    symbol = "transformers.models.bloom.modeling_bloom.build_alibi_tensor"
    config = AutoConfig.for_model("bloom", hidden_size=32, n_layer=1, n_head=4, vocab_size=64)
    bloom = AutoModelForCausalLM.from_config(config)
    with upstream(symbol, HF):
        found = hf.modeling_module_defines(bloom, "build_alibi_tensor")
        llama = hf.modeling_module_defines(tiny_decoder("llama"), "build_alibi_tensor")
    expect(found and not llama, symbol, HF, f"bloom {found}, llama {llama}")


def test_script_object_type_name_is_still_offered():
    """Exercised with a real process group by tests/distributed on the GPU; here: the method is there."""
    symbol = "torch.ScriptObject._type().qualified_name"
    with upstream(symbol, TORCH):
        method = torch.ScriptObject._type
    expect(callable(method), symbol, TORCH, "torch.ScriptObject._type is not callable")


def test_stop_compile_workers():
    symbol = "torch._inductor.async_compile.shutdown_compile_workers"
    with upstream(symbol, TORCH):
        from torch._inductor.async_compile import shutdown_compile_workers

        required = [p for p in inspect.signature(shutdown_compile_workers).parameters.values() if p.default is p.empty]
        ti.stop_compile_workers()  # the module is imported now: the call reaches it
    expect(not required, symbol, TORCH, f"it now requires {[p.name for p in required]}")


def test_symmetric_empty_and_rendezvous_take_what_we_pass():
    for symbol, names in (
        ("torch.distributed._symmetric_memory.empty", {"dtype", "device"}),
        ("torch.distributed._symmetric_memory.rendezvous", {"tensor", "group"}),
    ):
        with upstream(symbol, TORCH):
            import torch.distributed._symmetric_memory as symm_mem

            parameters = set(inspect.signature(getattr(symm_mem, symbol.rsplit(".", 1)[1])).parameters)
        expect(names <= parameters, symbol, TORCH, f"parameters are now {sorted(parameters)}")


def test_symmetric_rendezvous_enables_the_group_once_without_a_warning(monkeypatch):
    """torch.distributed._symmetric_memory.enable_symm_mem_for_group (needed before 2.9, a FutureWarning
    since) is called silenced when the group is not enabled, then rendezvous(tensor, group_name)."""
    import warnings

    symbol = "torch.distributed._symmetric_memory.is_symm_mem_enabled_for_group / rendezvous"
    calls = []
    with upstream(symbol, TORCH):
        import torch.distributed._symmetric_memory as symm_mem

        expect(callable(symm_mem.is_symm_mem_enabled_for_group), symbol, TORCH, "not a function")
        monkeypatch.setattr(symm_mem, "enable_symm_mem_for_group", lambda name: calls.append(("enable", name)))
        monkeypatch.setattr(symm_mem, "rendezvous", lambda tensor, name: calls.append(("rendezvous", name)))
        buffer = torch.empty(4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ti.symmetric_rendezvous(buffer, "group-x")
    assert calls == [("enable", "group-x"), ("rendezvous", "group-x")]


def test_one_shot_all_reduce_copy_schema():
    symbol = "torch.ops.symm_mem.one_shot_all_reduce_copy"
    with upstream(symbol, TORCH):
        import torch.distributed._symmetric_memory  # noqa: F401 - registers the namespace's Python parts

        schema = str(torch.ops.symm_mem.one_shot_all_reduce_copy.default._schema)
    expected = "(Tensor symm_buffer, Tensor local_input, str reduce_op, str group_name) -> Tensor"
    expect(schema.endswith(expected), symbol, TORCH, f"schema is now {schema}")


def test_grouped_mm_and_the_dtypes_and_gpus_whose_kernel_reads_the_host():
    """The op HF's grouped_mm experts call, with the arguments hidden_host_read reads; the fast path's rule."""
    symbol = "torch.ops.aten._grouped_mm"
    with upstream(symbol, TORCH):
        schema = str(aten._grouped_mm.default._schema)
    for argument in ("Tensor self", "Tensor mat2", "Tensor? offs=None", "ScalarType? out_dtype=None"):
        expect(argument in schema, symbol, TORCH, f"schema is now {schema}")
    bf16, f32 = torch.bfloat16, torch.float32
    assert not ti.grouped_mm_reads_host((bf16, bf16, bf16), (9, 0))
    assert not ti.grouped_mm_reads_host((bf16, bf16, bf16), (10, 0))
    assert ti.grouped_mm_reads_host((f32, f32, f32), (9, 0))
    assert ti.grouped_mm_reads_host((bf16, bf16, f32), (9, 0))
    assert ti.grouped_mm_reads_host((bf16, bf16, bf16), (8, 0))
    a, b = torch.randn(4, 8), torch.randn(2, 8, 3)
    offs = torch.tensor([2, 4], dtype=torch.int32)
    assert ti.hidden_host_read(aten._grouped_mm.default, (a, b, offs), {}) is None  # the CPU reads no device
    assert ti.hidden_host_read(aten.mm.default, (a, a.T), {}) is None


def test_has_call_hooks_sees_own_and_global_forward_hooks():
    from accelerate_graph.compat.torch_internals import has_call_hooks

    linear = torch.nn.Linear(2, 2)
    assert not has_call_hooks(linear)
    handle = linear.register_forward_hook(lambda module, args, output: output)
    assert has_call_hooks(linear)
    handle.remove()
    handle = linear.register_forward_pre_hook(lambda module, args: None)
    assert has_call_hooks(linear)
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: output)
    try:
        assert has_call_hooks(linear)
    finally:
        handle.remove()
    assert not has_call_hooks(linear)


def test_a_hook_replaced_in_its_table_runs_in_its_place_with_its_flags():
    symbol = "torch.nn.Module._forward_pre_hooks / _forward_hooks (by handle id)"
    linear = torch.nn.Linear(2, 2)
    calls = []
    linear.register_forward_pre_hook(lambda module, args, kwargs: calls.append("pre") or None, with_kwargs=True)
    linear.register_forward_hook(lambda module, args, output: output * 0, always_call=True)
    pre, post = ti.forward_hook_tables(linear)
    expect(len(pre) == 1 and len(post) == 1, symbol, TORCH, f"tables of {len(pre)} and {len(post)} hooks")
    for table in (pre, post):
        for key, hook in list(table.items()):
            table[key] = lambda *args, hook=hook, **kwargs: calls.append("wrapped") or hook(*args, **kwargs)
    out = linear(torch.ones(1, 2))
    expect(calls == ["wrapped", "pre", "wrapped"], symbol, TORCH, f"the replaced hooks ran as {calls}")
    expect(bool((out == 0).all()), symbol, TORCH, "the replaced forward hook's result was not used")


def test_inductor_generated_code_returns_the_result_and_the_source():
    compiled = torch.compile(lambda x: (x * 2).sin(), backend="inductor")
    result, code = ti.inductor_generated_code(compiled, torch.ones(4))
    assert torch.allclose(result, torch.ones(4).mul(2).sin())
    assert len(code) == 1 and "def call(" in code[0], "torch._inductor.utils.run_and_get_code changed"


def test_rotary_embedding_modules_finds_hfs_rotary_module_and_skips_length_dependent_ropes():
    symbol = "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding (rotary_emb, inv_freq, rope_type)"
    llama = tiny_decoder("llama")
    dynamic = tiny_decoder("llama", rope_scaling={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    with upstream(symbol, HF):
        found = hf.rotary_embedding_modules(llama)
        skipped = hf.rotary_embedding_modules(dynamic)
    expect(found == [llama.model.rotary_emb] and skipped == [], symbol, HF, f"found {found}, dynamic {skipped}")


def test_final_norm_module_is_the_decoders_norm():
    symbol = "transformers.models.llama.modeling_llama.LlamaModel.norm (via get_decoder())"
    llama = tiny_decoder("llama")
    gpt2 = AutoModelForCausalLM.from_config(AutoConfig.for_model("gpt2", n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    with upstream(symbol, HF):
        found, none = hf.final_norm_module(llama), hf.final_norm_module(gpt2)
    expect(found is llama.model.norm and none is None, symbol, HF, f"llama {type(found)}, gpt2 {type(none)}")


def test_causal_mask_modules_are_the_modeling_files_whose_forward_calls_it():
    symbol = "transformers.models.llama.modeling_llama.create_causal_mask (the global LlamaModel.forward calls)"
    from transformers import masking_utils

    llama = tiny_decoder("llama")
    calls = []

    def stand_in(*args, **kwargs):
        calls.append(kwargs)
        return masking_utils.create_causal_mask(*args, **kwargs)

    with upstream(symbol, HF):
        modules = hf.causal_mask_modules(llama)
        with hf.causal_mask_replaced(llama, stand_in), torch.no_grad():
            llama(input_ids=torch.ones(1, 3, dtype=torch.long))
        restored = [m.create_causal_mask for m in modules]
    names = [m.__name__ for m in modules]
    expect(names == ["transformers.models.llama.modeling_llama"], symbol, HF, f"found {names}")
    expect(len(calls) == 1, symbol, HF, f"the forward called the module's create_causal_mask {len(calls)} times")
    expect(restored == [masking_utils.create_causal_mask], symbol, HF, "not restored")


def test_sdpa_mask_builder_reads_the_mask_interface():
    symbol = "transformers.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS / sdpa_mask"
    from accelerate_graph.fused.grouped_attention import GROUPED, register

    with upstream(symbol, HF):
        register()
        found = {name: hf.sdpa_mask_builder(name) for name in ("sdpa", GROUPED, "eager", "not_registered", None)}
    expected = {"sdpa": True, GROUPED: True, "eager": False, "not_registered": False, None: False}
    expect(found == expected, symbol, HF, f"found {found}")


def test_static_decode_mask_sizes_are_what_create_causal_mask_reads():
    symbol = "transformers.cache_utils.Cache.get_query_offset / get_mask_sizes (StaticLayer), create_causal_mask"
    from transformers import masking_utils
    from transformers.cache_utils import Cache, DynamicCache

    llama = tiny_decoder("llama")
    with upstream(symbol, HF):
        layer = _allocated_layer()  # 2 tokens written into 16 slots
        cache = Cache(layers=[layer])
        position, kv_length = hf.static_decode_mask_sizes(cache)
        name = (
            "cache" if "cache" in inspect.signature(masking_utils.create_causal_mask).parameters else "past_key_values"
        )
        mask = masking_utils.create_causal_mask(
            config=llama.config, inputs_embeds=torch.zeros(3, 1, 64), attention_mask=torch.ones(3, 16), **{name: cache}
        )
        refused = hf.static_decode_mask_sizes(DynamicCache())
    expect(position is layer.cumulative_length and kv_length == 16, symbol, HF, f"read {position}, {kv_length}")
    # never skipped for one token over a static cache (compileable), and the query sees slots 0..position
    expect(mask is not None and mask.shape == (3, 1, 1, 16), symbol, HF, f"the mask is {mask}")
    allowed = mask[0, 0, 0].nonzero().flatten().tolist()
    expect(allowed == [0, 1, 2], symbol, HF, f"at position 2 the query attends slots {allowed}")
    expect(refused is None, symbol, HF, "a dynamic cache was taken for a static one")


def test_create_causal_mask_takes_the_arguments_the_stand_in_knows():
    symbol = "transformers.masking_utils.create_causal_mask (parameters and defaults)"
    from transformers import masking_utils

    with upstream(symbol, HF):
        parameters = inspect.signature(masking_utils.create_causal_mask).parameters
    unknown = set(parameters) - hf.CAUSAL_MASK_ARGUMENTS - set(hf.CAUSAL_MASK_PLAIN_DEFAULTS)
    expect(not unknown, symbol, HF, f"new parameters {sorted(unknown)}: the stand-in must learn them")
    changed = {
        name: parameters[name].default
        for name, plain in hf.CAUSAL_MASK_PLAIN_DEFAULTS.items()
        if name in parameters and parameters[name].default is not plain
    }
    expect(not changed, symbol, HF, f"defaults changed: {changed}")
