// write(1350 contiguous) vs writev(394 + 956) on loopback TCP; writer thread's CPU per call.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <time.h>
static int rfd;
static void *reader(void *a){ char buf[65536]; for(;;){ ssize_t n=read(rfd,buf,sizeof buf); if(n<=0) break;} return 0; }
static double cpu(void){ struct rusage r; getrusage(RUSAGE_THREAD,&r); return r.ru_utime.tv_sec*1e6+r.ru_utime.tv_usec+r.ru_stime.tv_sec*1e6+r.ru_stime.tv_usec; }
int main(int argc,char**argv){
  int N=atoi(argv[1]), R=atoi(argv[2]);
  int l=socket(AF_INET,SOCK_STREAM,0); struct sockaddr_in a={.sin_family=AF_INET,.sin_addr.s_addr=htonl(0x7f000001)};
  bind(l,(void*)&a,sizeof a); socklen_t al=sizeof a; getsockname(l,(void*)&a,&al); listen(l,1);
  int c=socket(AF_INET,SOCK_STREAM,0); connect(c,(void*)&a,sizeof a); rfd=accept(l,0,0);
  int one=1; setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,sizeof one);
  pthread_t t; pthread_create(&t,0,reader,0);
  static char whole[1350], body[956] ; char *head=whole; memset(whole,'a',1350); memset(body,'b',956);
  for(int r=0;r<R;r++){
    for(int m=0;m<2;m++){ int mode=(m+r)%2;
      double c0=cpu();
      for(int i=0;i<N;i++){
        if(mode==0){ if(write(c,whole,1350)!=1350) abort(); }
        else { struct iovec v[2]={{head,394},{body,956}}; if(writev(c,v,2)!=1350) abort(); }
      }
      double c1=cpu();
      printf("%s %.3f us/call\n", mode? "writev2":"write  ", (c1-c0)/N);
    }
  }
  return 0;
}
