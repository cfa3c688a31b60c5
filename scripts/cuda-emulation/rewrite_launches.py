import re, sys
src = open(sys.argv[1]).read()
out = []
i = 0
pat = re.compile(r'([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<')
while True:
    m = pat.search(src, i)
    if not m:
        out.append(src[i:]); break
    out.append(src[i:m.start()])
    name = m.group(1)
    j = src.index('>>>', m.end())
    cfg = src[m.end():j]
    # split top-level commas
    parts, depth, cur = [], 0, ''
    for ch in cfg:
        if ch in '(<[': depth += 1
        if ch in ')>]': depth -= 1
        if ch == ',' and depth == 0: parts.append(cur); cur = ''
        else: cur += ch
    parts.append(cur)
    k = src.index('(', j)
    depth = 0; e = k
    while True:
        if src[e] == '(': depth += 1
        elif src[e] == ')':
            depth -= 1
            if depth == 0: break
        e += 1
    args = src[k+1:e]
    smem = parts[2] if len(parts) > 2 else '0'
    out.append('::emu::launch(dim3(%s), dim3(%s), size_t(%s), [&] { %s(%s); })' % (parts[0], parts[1], smem, name, args))
    i = e + 1
res = ''.join(out)
res = re.sub(r'extern\s+__shared__\s+(\w+)\s+(\w+)\[\];', r'\1 *\2 = (\1 *)::emu::dynamicShared();', res)
open(sys.argv[2], 'w').write(res)
