#!/usr/bin/env bash
# The GPU check: one prepared command that proves dstbench's CUDA path on a bare GPU host.
#
#   scripts/gpu_check.sh [--out DIR] [--wheels DIR] [--budget SECONDS] [--cpu]
#
# The host needs PyTorch (CUDA), timm, pandas, seaborn, tabulate, scipy, jinja2, rich, nvidia-ml-py
# and pytest(-benchmark); it needs no network. What else dstbench needs (pydantic and its
# dependencies) comes as wheels in --wheels (default .whl/, README "GPU check" says how to fill it).
# dstbench itself is installed without resolving dependencies.
#
# Steps, each under what is left of --budget (default 420 s, which with a GPU machine's start-up fits a
# 15-minute device allowance; a step that would start with under 30 s left is skipped, and a running
# one is stopped with SIGTERM, which dstbench handles as Ctrl-C: finished cases are kept). Each step
# keeps a share of the budget for the steps after it (`share`), so the shares scale with --budget
# and a step that ends early leaves its time to the next:
#   1. the environment: GPU, driver, torch, CUDA;
#   2. one 2:4 forward and backward (execution semi_structured's layer) at ViT-Small shapes (width
#      384, FFN 1536, 65 tokens, batch 64) in bf16 against the dense product, pass or fail per
#      layer; a host without cuSPARSELt or an sm80+ GPU says so and the check goes on (the step
#      exits 77: skipped, not failed);
#   3. the CUDA-only tests (`pytest -m cuda`);
#   4. a shortened l40_vit: every method at densities 0.1 and 0.5, fewer and shorter segments, with
#      its HTML and Markdown reports;
#   5. a profile of rigl and barter at 0.1, with the CUDA memory snapshot;
#   6. torch.compile's effect: dense and rigl at 0.5, eager and compiled, one run (a sweep over
#      `compile`), as timed as step 4.
# Everything lands in --out (default $OUT when set, else gpu_check_out/): gpu_check.log, env.txt,
# the reports, each run folder's results.jsonl, run.json and suite.yaml on their own under
# run_folders/ (what reports and `compare` read), and gpu_check.tar.gz holding the whole run folders
# (traces and snapshots too, as long as it stays under 15 MiB: a host returns files up to 16 MiB;
# over that, snapshots and then traces are left out of it, and the log says so).
#
# --cpu: the same steps on the CPU with a micro model, seconds each: CI runs it
# (tests/scripts/test_gpu_check.py) so that this script cannot rot between GPU checks. The 2:4
# check runs there too, outside the budget, and skips itself at once (no CUDA); torch.compile uses
# the aot_eager backend there (traced, no code generated: seconds instead of minutes).
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-gpu_check_out}"
wheels="$repo/.whl"
budget=420
cpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --wheels) wheels="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --cpu) cpu=1; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$budget" in ''|*[!0-9]*) echo "gpu_check.sh: --budget takes whole seconds, got '$budget'" >&2; exit 2 ;; esac

mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
work="$out/work"
rm -rf "$work" && mkdir -p "$work"
log="$out/gpu_check.log"
: >"$log"
exec > >(tee -a "$log") 2>&1
start=$(date +%s)
python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
steps=()   # "name: status" per step, printed at the end
failed=0

say() { printf '\n== %s (%ss left)\n' "$1" "$(remaining)"; }
remaining() { echo $((budget - ($(date +%s) - start))); }
# share PERCENT: that part of the budget, in whole seconds (what a step keeps for the steps after it).
share() { echo $((budget * $1 / 100)); }

# run_step NAME RESERVE COMMAND...: run COMMAND with what is left of the budget minus RESERVE (time
# kept for the steps after it); skip it when under 30 s would be left.
run_step() {
  local name="$1" reserve="$2"; shift 2
  local limit=$(( $(remaining) - reserve ))
  say "$name"
  if [ "$limit" -lt 30 ]; then
    echo "skipped: ${limit}s of the budget would be left for it"
    steps+=("$name: skipped (budget)"); failed=1; return
  fi
  local began=$(date +%s)
  timeout --signal=TERM --kill-after=20 "$limit" "$@"
  local code=$? took=$(( $(date +%s) - began ))
  case "$code" in
    0) steps+=("$name: ok (${took}s of ${limit}s)") ;;
    77) steps+=("$name: skipped (cannot run on this host, see its output)") ;;  # not a failure
    124|143) steps+=("$name: stopped at the budget (${limit}s)"); failed=1 ;;
    *) steps+=("$name: exit $code (after ${took}s)"); failed=1 ;;
  esac
}

cd "$repo" || exit 2

# -- install ---------------------------------------------------------------------------------------
say "install"
if compgen -G "$wheels/*.whl" >/dev/null; then
  site="$work/site"
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheels"/*.whl || exit 2
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  echo "wheels from $wheels: $(cd "$wheels" && ls *.whl | tr '\n' ' ')"
fi
if "$python" - "$repo" <<'EOF'
import pathlib, sys
try:
    import dstbench
except ImportError:
    sys.exit(1)
sys.exit(0 if pathlib.Path(dstbench.__file__).resolve().parents[1] == pathlib.Path(sys.argv[1]).resolve() else 1)
EOF
then
  echo "dstbench is installed from this checkout"
else
  # No dependency resolution (no network); the host's setuptools builds the editable install.
  "$python" -m pip install -q --no-deps --no-build-isolation --no-index -e "$repo" || exit 2
fi

# -- 1. environment --------------------------------------------------------------------------------
say "environment"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  else
    echo "nvidia-smi: not found"
  fi
  "$python" - <<'EOF'
import platform, torch, timm, dstbench
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), timm {timm.__version__}, dstbench {dstbench.__version__}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU 0: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs, capability {p.major}.{p.minor}; cuDNN {torch.backends.cudnn.version()}")
else:
    print("torch sees no CUDA device")
EOF
} | tee "$out/env.txt"

if [ "$cpu" = 1 ]; then
  # The same suite, on the CPU and at micro size; semi_structured (CUDA only) is left out.
  device=cpu
  shape=(--set device=cpu --set precision=fp32 --set batch_size=8
         --set model.embed_dim=64 --set model.depth=2 --set model.num_heads=4 --set model.patch_size=8
         --set "methods=[dense, static, {name: rigl, params: {delta_t: 4}}, {name: rigl, label: rigl_csr, params: {delta_t: 4, execution: csr}}, small_dense, {name: barter, params: {delta_t: 4}}]")
  timing=(--set timing.warmup_steps=2 --set timing.segment_steps=2 --set timing.segments=3 --set timing.total_steps=40)
  profile_steps=(--set profile.steps=2 --set profile.max_advance_steps=10)
  compiled="{enabled: true, backend: aot_eager}"
else
  device=cuda
  shape=()
  # 10 warmup steps, then 6 segments of 20 steps: the update scheduled at step 100 (delta_t 100)
  # falls inside the timed segments, as it does in the full suite.
  timing=(--set timing.warmup_steps=10 --set timing.segment_steps=20 --set timing.segments=6 --set timing.total_steps=1000)
  profile_steps=()
  compiled="true"
fi

# -- 2. one 2:4 forward and backward at ViT-Small shapes -------------------------------------------
# Each prunable linear of a ViT-Small block on a random transposable 2:4 mask, through
# SemiStructuredLinear under bf16 autocast, against F.linear on the same masked weight.
read -r -d '' two_four_check <<'EOF'
import sys
import torch
import torch.nn.functional as F

SKIPPED = 77
if not torch.cuda.is_available():
    print("2:4 check skipped: torch sees no CUDA device")
    sys.exit(SKIPPED)
if not torch.backends.cusparselt.is_available():
    print(f"2:4 check skipped: this torch ({torch.__version__}) has no cuSPARSELt; execution semi_structured cannot run here")
    sys.exit(SKIPPED)
if torch.cuda.get_device_capability() < (8, 0):
    print("2:4 check skipped: this GPU has no 2:4 sparse tensor cores (compute capability below 8.0)")
    sys.exit(SKIPPED)

from dstbench.dst.masked import semi_structured

torch.manual_seed(0)
batch, tokens, width, hidden = 64, 65, 384, 1536
layers = {"attn.qkv": (3 * width, width), "attn.proj": (width, width), "mlp.fc1": (hidden, width), "mlp.fc2": (width, hidden)}


def relative(got, want):
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


failed = []
for name, (out_features, in_features) in layers.items():
    try:
        linear = torch.nn.Linear(in_features, out_features, device="cuda")
        with torch.no_grad():
            mask = semi_structured.project_transposable_2to4(torch.rand(out_features, in_features, device="cuda") < 0.5, linear.weight)
            linear.weight.mul_(mask)
        weight = linear.weight.detach().clone().requires_grad_(True)
        bias = linear.bias.detach().clone().requires_grad_(True)
        layer = semi_structured.SemiStructuredLinear(linear)
        x = torch.randn(batch, tokens, in_features, device="cuda", requires_grad=True)
        x_dense = x.detach().clone().requires_grad_(True)
        grad = torch.randn(batch, tokens, out_features, device="cuda", dtype=torch.bfloat16)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = layer(x)
            dense = F.linear(x_dense, weight, bias)
        out.backward(grad)
        dense.backward(grad)
        torch.cuda.synchronize()
        errors = {"output": relative(out, dense), "input grad": relative(x.grad, x_dense.grad),
                  "weight grad": relative(linear.weight.grad * mask, weight.grad * mask)}
        ok = out.dtype == torch.bfloat16 and all(e < 2e-2 for e in errors.values())
        text = ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
        print(f"{name} {out_features}x{in_features}: {text} (relative to the dense bf16 product): {'pass' if ok else 'FAIL'}")
    except Exception as exc:  # a kernel that refuses the shape: that layer fails, the others still run
        ok = False
        print(f"{name} {out_features}x{in_features}: FAIL ({type(exc).__name__}: {exc})")
    if not ok:
        failed.append(name)
print(f"one-kernel W/W^T compression, checked against the dense product: {semi_structured.pair_kernel_checks() or 'not used'}")
print(f"2:4 forward and backward at ViT-Small shapes in bf16: {'FAIL (' + ', '.join(failed) + ')' if failed else 'pass'}")
sys.exit(1 if failed else 0)
EOF
two_four_name="2:4 at ViT-Small shapes, bf16"
if [ "$cpu" = 1 ]; then
  # Outside the budget (it skips itself at once here), so a spent budget still skips only the rest.
  say "$two_four_name"
  timeout 120 "$python" -c "$two_four_check"
  code=$?
  case "$code" in
    0) steps+=("$two_four_name: ok") ;;
    77) steps+=("$two_four_name: skipped (cannot run on this host, see its output)") ;;
    *) steps+=("$two_four_name: exit $code"); failed=1 ;;
  esac
else
  run_step "$two_four_name" "$(share 80)" "$python" -c "$two_four_check"
fi

# -- 3. CUDA-only tests ----------------------------------------------------------------------------
# On the CPU these skip: the step proves they are collected and selected.
run_step "CUDA-only tests" "$(share 62)" "$python" -m pytest -q -m cuda -p no:cacheprovider tests

# -- 4. shortened l40_vit --------------------------------------------------------------------------
# At the suite's own width only (its width sweep is the full run's, three times as long).
one_point=(--set "sweep={}")
run_step "l40_vit at 0.1 and 0.5" "$(share 26)" "$python" -m dstbench run suites/l40_vit.yaml --density 0.1 0.5 \
  "${one_point[@]}" "${shape[@]}" "${timing[@]}" --out "$work/runs" --html "$out/l40_vit_short.html" --markdown "$out/l40_vit_short.md"

# -- 5. profile of rigl and barter at 0.1 ----------------------------------------------------------
run_step "profile rigl, barter at 0.1" "$(share 14)" "$python" -m dstbench profile suites/l40_vit.yaml --only rigl barter --density 0.1 \
  "${one_point[@]}" "${shape[@]}" "${timing[@]}" "${profile_steps[@]}" --out "$work/profile"

# -- 6. torch.compile's effect ---------------------------------------------------------------------
# Eager and compiled in one run: a sweep over `compile` (each point its own group, eager first), so
# the report and `Run.frame()` hold both points' step times, timed as step 4 times its cases.
run_step "torch.compile: dense, rigl at 0.5" 8 "$python" -m dstbench run suites/l40_vit.yaml --only dense rigl --density 0.5 \
  --set "sweep={compile: [false, $compiled]}" "${shape[@]}" "${timing[@]}" --out "$work/compile" --markdown "$out/compile_short.md"

# -- pack ------------------------------------------------------------------------------------------
say "pack"
rm -rf "$work/site"
# Each run folder's results, run.json and suite.yaml on their own: what a report and `compare` read,
# back from any host whatever the tarball's size.
find "$work" -name results.jsonl | sort | while read -r results; do
  folder="$(dirname "$results")" && rel="${folder#"$work"/}"
  mkdir -p "$out/run_folders/$rel"
  for name in results.jsonl run.json suite.yaml; do
    [ -f "$folder/$name" ] && cp "$folder/$name" "$out/run_folders/$rel/"
  done
done
[ -d "$out/run_folders" ] && echo "run folders' results, run.json and suite.yaml: $out/run_folders ($(find "$out/run_folders" -name results.jsonl | wc -l) run folders)"
# The whole run folders, under the 16 MiB a host returns: snapshots, then traces, left out when over.
limit_bytes=$((15 * 1024 * 1024))
left_out=()
for leave in "" "*.memory.pickle" "*.trace.json.gz"; do
  [ -n "$leave" ] && left_out+=(--exclude="$leave")
  tar -czf "$out/gpu_check.tar.gz" "${left_out[@]}" -C "$work" . || break
  [ "$(stat -c %s "$out/gpu_check.tar.gz")" -le "$limit_bytes" ] && break
done
echo "run folders: $out/gpu_check.tar.gz ($(du -h "$out/gpu_check.tar.gz" | cut -f1))${left_out[*]:+, left out to stay under 15 MiB: ${left_out[*]}}"
rm -rf "$work"

printf '\n== summary (device %s, %ss of %ss used)\n' "$device" "$(( $(date +%s) - start ))" "$budget"
printf '  %s\n' "${steps[@]}"
exit "$failed"
