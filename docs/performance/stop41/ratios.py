import json,glob,sys
pat=sys.argv[1] if len(sys.argv)>1 else '*.json'
for f in sorted(glob.glob(pat)):
    d=json.load(open(f))
    r={ (x['mode'],x['pool']): x for x in d['results'] }
    sp=r.get(('sig-pin',0)); pooled=[x for (m,p),x in r.items() if m=='germline' and p>0]; un=r.get(('germline',0))
    if not sp or not pooled: continue
    g=pooled[0]
    print(f"{f}: load {d.get('load_at_start','').split()[0]} sig-pin {sp['median_ms']:.2f} (p99 {sp['p99_ms']:.2f}) | pooled {g['median_ms']:.2f} (p99 {g['p99_ms']:.2f}) = {g['median_ms']/sp['median_ms']:.2f}x | unpooled {un['median_ms']:.2f} = {un['median_ms']/sp['median_ms']:.1f}x" + (f" | refill {g.get('refill_per_s')} /s, {g.get('pooled_copy_private_kb')} kB" if g.get('refill_per_s') else ""))
