# The syscall pattern of a directory item written into a slot (docs/performance.md, "Issue 27:
# git_status without the per-call index rewrite"): by path through /proc/self/fd (before) and
# from directory descriptors (tree.rs since git40), on tmpfs, the files of /tmp/g40b/repo
# (bench39's repository). Run as root: python3 tree-writes-microbench.py
import os, time, shutil
files=[l.strip() for l in os.popen("cd /tmp/g40b/repo && find . -type f | sed 's#^./##'")]
data={f:open('/tmp/g40b/repo/'+f,'rb').read() for f in files}
base='/dev/shm/g40mb'
def pathway(b):
    fd=os.open(b,os.O_RDONLY|os.O_DIRECTORY); p=f'/proc/self/fd/{fd}'
    made=set()
    for f in files:
        parts=f.split('/')[:-1]; cur=p
        for c in parts:
            cur=cur+'/'+c
            if cur in made: continue
            try: os.lstat(cur)
            except FileNotFoundError: os.mkdir(cur)
            os.lchown(cur,0,0); made.add(cur)
        x=os.open(p+'/'+f,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW|os.O_CLOEXEC,0o444)
        os.write(x,data[f]); os.utime(x,ns=(1,1)); os.fchown(x,0,0); os.close(x)
    os.close(fd)
def fdway(b):
    fd=os.open(b,os.O_RDONLY|os.O_DIRECTORY); made={}
    for f in files:
        parts=f.split('/'); parent=fd; cur=''
        for c in parts[:-1]:
            cur+='/'+c
            if cur in made: parent=made[cur]; continue
            try: os.mkdir(c,dir_fd=parent)
            except FileExistsError: pass
            d=os.open(c,os.O_RDONLY|os.O_DIRECTORY|os.O_NOFOLLOW|os.O_CLOEXEC,dir_fd=parent)
            os.fchown(d,0,0); made[cur]=d; parent=d
        x=os.open(parts[-1],os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW|os.O_CLOEXEC,0o444,dir_fd=parent)
        os.write(x,data[f]); os.utime(x,ns=(1,1)); os.fchown(x,0,0); os.close(x)
    for d in made.values(): os.close(d)
    os.close(fd)
res={'path':[], 'fd':[]}
for r in range(400):
    for name,fn in (('path',pathway),('fd',fdway)) if r%2 else (('fd',fdway),('path',pathway)):
        shutil.rmtree(base,ignore_errors=True); os.mkdir(base)
        t=time.perf_counter(); fn(base); res[name].append(time.perf_counter()-t)
for k,v in res.items():
    v.sort(); print(k, 'median %.1f us'%(v[len(v)//2]*1e6), 'p10 %.1f'%(v[len(v)//10]*1e6))
shutil.rmtree(base,ignore_errors=True)
