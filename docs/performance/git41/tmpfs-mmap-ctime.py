#!/usr/bin/env python3
"""Does a write to a tmpfs file leave a mark in its ctime? (branch git41, docs/performance.md)

A copy that writes through a shared mapping after reading the page first changes the file
without changing its ctime or mtime on tmpfs (shmem has no page_mkwrite, and a read fault on a
shared writable mapping maps the page writable), so a read-back skipped on unchanged ctimes
would miss that write. Run as: python3 tmpfs-mmap-ctime.py /dev/shm/somewhere
"""
import mmap
import os
import sys
import time

d = sys.argv[1] if len(sys.argv) > 1 else "/dev/shm/git41-mmap"
os.makedirs(d, exist_ok=True)
p = os.path.join(d, "f")
with open(p, "wb") as f:
    f.write(b"a" * 8192)
st = os.stat(p)
print("written     ctime", st.st_ctime_ns, "mtime", st.st_mtime_ns)
time.sleep(0.05)
fd = os.open(p, os.O_RDWR)
m = mmap.mmap(fd, 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
_ = m[0], m[4096]  # read faults first
time.sleep(0.05)
m[0:1] = b"Z"
m[4096:4097] = b"Y"
m.close()
os.close(fd)
st2 = os.stat(p)
with open(p, "rb") as f:
    first = f.read(1)
print("mmap-written ctime", st2.st_ctime_ns, "mtime", st2.st_mtime_ns, "first byte", first)
print("ctime changed:", st2.st_ctime_ns != st.st_ctime_ns, "contents changed:", first == b"Z")
