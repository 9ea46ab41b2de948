"""tinycore-conformance: the shared suite that proves a tinycore backend correct, as a pytest plugin and a CLI."""
__version__ = "0.1.0"

# the report's rows, in order; each is a pytest marker applied to one test module
SECTIONS = {
  "contract": "the contract version the plugin states, then each plugin role on its own: renderer without the device, assembler, allocator, driver",
  "ops": "every Tensor op, forward and backward, against numpy over the backend's declared dtypes",
  "uops": "one-op kernels built from UOps: every ALU op and cast on edge operands, bytes against the definition; fused intermediates",
  "accuracy": "transcendentals swept over each float dtype's whole finite range, within the bounds of tolerances.ACCURACY",
  "edges": "launch and memory edges: odd global sizes, one-element and empty buffers, alignment boundaries, odd view offsets, variable bounds",
  "dtypes": "casts, bitcasts, integer wraparound, NaN/inf/-0.0, half and bfloat16 rounding, undeclared dtypes",
  "specials": "special values by class: signed-zero constants, double rounding of narrowing casts, reduce identities, NaN payloads through casts and bitcasts",
  "fuzz": "random programs (hypothesis) of constants, aranges, data and views at the codegen's special sizes: elementwise, casts, movement, reductions, against numpy",
  "models": "a small MLP and convnet train a few SGD steps like a numpy implementation, deterministically",
  "multi": "two instances of the backend: transfers between them and to and from CPU, all-reduce, sharded reductions and matmuls",
  "blocks": "thread blocks, shared memory, barriers: grouped reductions and shared-memory tiles by explicit actions, and in common programs",
  "tensor_cores": "matmuls, batched and transposed, convolutions and inf/nan on each declared tensor core, within bounds from its types",
  "reduce_scale": "sums and means of 2^27 elements (constants, fused expressions, realized data) within a bound that does not grow with n",
  "resources": "no leaked buffers after many launches, many small launches, clean failures on impossible requests",
}
