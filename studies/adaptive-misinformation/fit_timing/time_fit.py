"""Time an AM fit on a real victim (1 thread) and score misinformation model + defense on the test split.
usage: time_fit.py <grid yaml> <json params>"""
import sys, time, json
from pathlib import Path
import torch
torch.set_num_threads(1)
from mebench.harness.grid import load_grid
from mebench.run import engine
from mebench.run.plan import site
from mebench.defenses import make_defense
from mebench.defenses.misinformation import AdaptiveMisinformation

grid = load_grid(Path(sys.argv[1]), Path.cwd())
cell = next(c for c in grid.cells if c.cfg.defense.name == "adaptive_misinformation")
cfg = cell.cfg
prep = engine.prepare(cell.plan, site(cfg), command="grid")
params = AdaptiveMisinformation.Params(**json.loads(sys.argv[2]))
t0 = time.perf_counter()
model = AdaptiveMisinformation.fit(params, engine.defense_context(cell.plan, prep))
fit_s = time.perf_counter() - t0
xt, yt = prep.split(prep.profile.name, False)
xs, _ = prep.split(cfg.dataset.surrogate_name, False)
am = make_defense("adaptive_misinformation", params, torch.Generator().manual_seed(0), model)
out = {"params": str(params), "fit_s": round(fit_s, 1)}
for tag, x in (("test", xt), ("pool_test", xs)):
    xf = x.float().div(255)
    y = prep.victim.probs(xf)
    d = am.apply(y, xf)
    mis = torch.softmax(model(xf), 1)
    out[tag] = {"victim_maxp_below_tau": float((y.max(1).values < params.tau).float().mean()),
                "top1_changed": float((d.argmax(1) != y.argmax(1)).float().mean()),
                "mis_model_agrees_victim": float((mis.argmax(1) == y.argmax(1)).float().mean())}
    if tag == "test":
        out[tag]["defended_acc"] = float((d.argmax(1) == yt).float().mean())
        out[tag]["victim_acc"] = float((y.argmax(1) == yt).float().mean())
print(json.dumps(out))
