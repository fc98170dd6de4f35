"""Groups a callgrind profile of `engram bench throughput --threads none` into the phases of a
training step: the forward of each autodiff op, the backward of each, the optimiser's update and
engram's own per-step work; then the functions with the most exclusive cost and their library.

Usage: python3 bench/profile/phases.py OUT.cg   (prints markdown; see bench/profile/profile.sh)

Costs are instructions (callgrind's Ir) over every step run, warm-up included; a row's share is of
the whole step (`engram::bench::throughput_of`, model building and data drawing excluded).
"""
import re
import subprocess
import sys

cg = sys.argv[1]


def annotate(inclusive):
    out = subprocess.run(
        ["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100", cg],
        capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
        if m and "PROGRAM TOTALS" not in line:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return rows


def first(rows, pattern):
    return next((c for c, f in rows if re.search(pattern, f)), 0)


incl = annotate(True)
total = first(incl, r"engram::bench::throughput_of ")
setup = sum(first(incl, p) for p in [r"engram::bench::model::BenchModel::build ", r"engram::bench::model::Inputs::draw "])
step = total - setup
pct = lambda c: f"{100 * c / step:.1f}%"
print(f"Whole step: {step / 1e6:,.0f} M instructions over the steps run (= 100%).\n")

print("| phase | M instr | share |\n|---|---|---|")
fwd = first(incl, r"engram_core::model::Model::forward_range_seeded ")
bwd = first(incl, r"burn_tensor::tensor::api::autodiff::backward_impl ")
opt = first(incl, r"ModuleOptimizer::step ")
loss = first(incl, r"as engram_core::strategy::LossFn>::loss ")
batch = first(incl, r"engram::bench::model::Inputs::batch ")
own = step - fwd - bwd - opt - loss - batch
for name, c in [("forward (the model's blocks)", fwd), ("loss (cross-entropy)", loss),
                ("backward (autodiff graph)", bwd), ("optimiser update (burn-optim)", opt),
                ("batch upload (host → tensor)", batch), ("engram's own per-step work (the rest)", own)]:
    print(f"| {name} | {c / 1e6:,.1f} | {pct(c)} |")

print("\nForward, per layer (Burn's nn modules and engram's blocks, inclusive; attention holds its linear layers,"
      " so these rows nest):\n")
print("| layer | M instr | share |\n|---|---|---|")
seen = set()
for c, f in incl:
    m = re.search(r"(burn_nn::modules::[a-z_:]+::[A-Za-z]+::forward|engram_core::model::cnn::batch_norm"
                  r"|burn_tensor::tensor::activation::[a-z_]+|Tensor<_>>::random_like) ", f)
    if m and m.group(1) not in seen and c >= 0.003 * step:
        seen.add(m.group(1))
        print(f"| `{m.group(1)}` | {c / 1e6:,.1f} | {pct(c)} |")

print("\nForward, per autodiff op (inclusive; the ops a layer composes are listed one by one):\n")
print("| op | M instr | share |\n|---|---|---|")
fw = [(c, re.search(r"Autodiff<B,C>>::([a-z_0-9]+) ", f).group(1)) for c, f in incl
      if re.search(r"for burn_autodiff::backend::Autodiff<B,C>>::[a-z_0-9]+ ", f)]
for c, name in [x for x in fw if x[0] >= 0.003 * step][:16]:
    print(f"| {name} | {c / 1e6:,.1f} | {pct(c)} |")

print("\nBackward, per autodiff op (inclusive):\n")
print("| op's backward | M instr | share |\n|---|---|---|")
bw = [(c, re.search(r"::([A-Za-z0-9]+) as burn_autodiff::ops::backward::Backward", f).group(1)) for c, f in incl
      if re.search(r"::[A-Za-z0-9]+ as burn_autodiff::ops::backward::Backward", f)]
for c, name in [x for x in bw if x[0] >= 0.003 * step][:16]:
    print(f"| {name} | {c / 1e6:,.1f} | {pct(c)} |")

print("\nMost exclusive cost (where the instructions run):\n")
print("| function | library | M instr | share |\n|---|---|---|---|")
excl = annotate(False)
for c, f in excl[:12]:
    lib = re.search(r"\[(.*?)\]\s*$", f)
    lib = lib.group(1).split("/")[-1] if lib else ""
    name = re.sub(r"\s*\[.*\]\s*$", "", f).replace("???:", "")
    name = re.sub(r"^.*?:(?=[A-Za-z_<])", "", name) if name.startswith(".") else name
    print(f"| `{name[:110]}` | {lib} | {c / 1e6:,.1f} | {pct(c)} |")
