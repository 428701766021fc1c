from roam_core.zoo import trace_zoo
from roam_core.formats.graph_io import save_graph
import collections
ts = trace_zoo("gpt2", 2, 512, attention="math")
g = ts.graph
save_graph(g, "/tmp/rc/gpt2-b2-t512.json.gz")
c = collections.Counter(o.module for o in g.ops if o.phase.value=="forward")
print(list(c.items())[:30])
print(sum(o.flops for o in g.ops))
