// The kernel's cost of a copy's namespaces, alone: a child unshares NET|IPC|UTS|NS as the
// bootstrap's copy_main does (argument "n": NET alone, "o": the others), timed as the child's
// CPU (CLOCK_PROCESS_CPUTIME_ID) and wall. The network namespace's cleanup after the exit runs
// in a kernel worker and is not counted. Build: gcc -O2 -o ns ns.c; run as root: ./ns 100 [n|o]
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
static double cpu_ns(void){struct timespec t;clock_gettime(CLOCK_PROCESS_CPUTIME_ID,&t);return t.tv_sec*1e9+t.tv_nsec;}
static double wall_ns(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  int rounds=argc>1?atoi(argv[1]):30;
  int flags=CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWNS;
  if(argc>2&&argv[2][0]=='n') flags=CLONE_NEWNET;
  if(argc>2&&argv[2][0]=='o') flags=CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWNS;
  double tot_c=0,tot_w=0;
  for(int r=0;r<rounds;r++){
    int pfd[2]; pipe(pfd);
    pid_t pid=fork(); if(pid<0){perror("fork");return 1;}
    if(pid==0){
      double c0=cpu_ns(),w0=wall_ns();
      if(unshare(flags)){perror("unshare");_exit(1);}
      double c1=cpu_ns(),w1=wall_ns();
      double v[2]={c1-c0,w1-w0}; write(pfd[1],v,sizeof v); _exit(0);
    }
    double v[2]; read(pfd[0],v,sizeof v); waitpid(pid,0,0);
    close(pfd[0]);close(pfd[1]);
    tot_c+=v[0]; tot_w+=v[1];
  }
  printf("unshare(flags=%#x): mean %.3f ms CPU, %.3f ms wall over %d\n",flags,tot_c/rounds/1e6,tot_w/rounds/1e6,rounds);
  return 0;
}
