/* /dev/shm and System V IPC inside an instance:
 * shm_open and sem_open in a memory-backed /dev/shm, System V shared
 * memory, semaphore sets and message queues, with blocking between
 * threads. Prints the same natively and on shoal. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

union semun {
	int val;
	struct semid_ds *buf;
	unsigned short *array;
};

static const char *en(int e)
{
	switch (e) {
	case EAGAIN: return "EAGAIN";
	case EEXIST: return "EEXIST";
	case ENOENT: return "ENOENT";
	case EINVAL: return "EINVAL";
	case EIDRM: return "EIDRM";
	case ENOMSG: return "ENOMSG";
	case E2BIG: return "E2BIG";
	case EFBIG: return "EFBIG";
	case ERANGE: return "ERANGE";
	default: return strerror(e);
	}
}

#define SHOW(label, expr) do { long r_ = (long)(expr); printf("%-44s %ld %s\n", label, r_, r_ < 0 ? en(errno) : ""); } while (0)
#define OK(label, expr) do { long r_ = (long)(expr); printf("%-44s %s\n", label, r_ < 0 ? en(errno) : "ok"); } while (0)

static char name[64], sname[64];

static void posix_shm(void)
{
	printf("-- /dev/shm\n");
	struct stat st;
	OK("stat /dev/shm", stat("/dev/shm", &st));
	printf("directory %d, mode %o\n", S_ISDIR(st.st_mode), st.st_mode & 07777);
	int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
	OK("shm_open O_CREAT|O_EXCL", fd);
	SHOW("shm_open O_EXCL again", shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600));
	OK("ftruncate 4096", ftruncate(fd, 4096));
	char *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("mmap: %s\n", p == MAP_FAILED ? en(errno) : "ok");
	strcpy(p, "shared hello");
	munmap(p, 4096);
	close(fd);
	fd = shm_open(name, O_RDONLY, 0);
	char buf[32] = { 0 };
	SHOW("read after reopening", read(fd, buf, 12));
	printf("  \"%s\"\n", buf);
	fstat(fd, &st);
	printf("size %ld\n", (long)st.st_size);
	close(fd);
	OK("shm_unlink", shm_unlink(name));
	SHOW("shm_open after unlink", shm_open(name, O_RDONLY, 0));
}

static sem_t *named;
static void *named_waiter(void *a)
{
	(void)a;
	printf("thread: sem_wait\n");
	sem_wait(named);
	printf("thread: got the semaphore\n");
	return 0;
}

static void posix_sem(void)
{
	printf("-- sem_open\n");
	named = sem_open(sname, O_CREAT | O_EXCL, 0600, 1);
	printf("sem_open: %s\n", named == SEM_FAILED ? en(errno) : "ok");
	if (named == SEM_FAILED)
		return;
	OK("sem_wait", sem_wait(named));
	SHOW("sem_trywait", sem_trywait(named));
	sem_t *again = sem_open(sname, 0);
	printf("sem_open again: same %d\n", again == named);
	pthread_t t;
	pthread_create(&t, 0, named_waiter, 0);
	usleep(50000);
	printf("main: sem_post\n");
	sem_post(named);
	pthread_join(t, 0);
	int v = -1;
	sem_getvalue(named, &v);
	printf("value %d\n", v);
	sem_close(again);
	sem_close(named);
	OK("sem_unlink", sem_unlink(sname));
}

static void sysv_shm(key_t key)
{
	printf("-- System V shared memory\n");
	int id = shmget(key, 10000, IPC_CREAT | IPC_EXCL | 0640);
	OK("shmget IPC_CREAT|IPC_EXCL", id);
	SHOW("shmget IPC_CREAT|IPC_EXCL again", shmget(key, 10000, IPC_CREAT | IPC_EXCL | 0640));
	printf("shmget by key: same %d\n", shmget(key, 100, 0) == id);
	SHOW("shmget by key, larger", shmget(key, 20000, 0));
	SHOW("shmget size 0", shmget(IPC_PRIVATE, 0, IPC_CREAT | 0600));
	char *a = shmat(id, 0, 0);
	char *b = shmat(id, 0, 0);
	printf("shmat: %s %s\n", a == (void *)-1 ? en(errno) : "ok", b == (void *)-1 ? en(errno) : "ok");
	printf("zero-filled %d\n", a[0] == 0 && a[9999] == 0);
	strcpy(a, "through a");
	printf("seen through b: \"%s\"\n", b);
	struct shmid_ds ds;
	OK("IPC_STAT", shmctl(id, IPC_STAT, &ds));
	printf("segsz %lu, nattch %lu, mode %o, cpid self %d\n", (unsigned long)ds.shm_segsz,
	       (unsigned long)ds.shm_nattch, ds.shm_perm.mode & 0777, ds.shm_cpid == getpid());
	ds.shm_perm.mode = 0600;
	OK("IPC_SET mode 600", shmctl(id, IPC_SET, &ds));
	OK("IPC_RMID while attached", shmctl(id, IPC_RMID, 0));
	SHOW("shmget by key after IPC_RMID", shmget(key, 100, 0));
	OK("shmdt a", shmdt(a));
	OK("IPC_STAT: still there", shmctl(id, IPC_STAT, &ds));
	printf("nattch %lu, mode %o\n", (unsigned long)ds.shm_nattch, ds.shm_perm.mode & 0777);
	OK("shmdt b", shmdt(b));
	SHOW("IPC_STAT after the last detach", shmctl(id, IPC_STAT, &ds));
	SHOW("shmdt again", shmdt(b));
}

static int semid;
static void *sem_waiter(void *a)
{
	(void)a;
	struct sembuf op = { 0, -1, 0 };
	printf("thread: semop -1\n");
	int r = semop(semid, &op, 1);
	printf("thread: semop %d %s\n", r, r ? en(errno) : "");
	return 0;
}

static void sysv_sem(void)
{
	printf("-- System V semaphores\n");
	semid = semget(IPC_PRIVATE, 3, IPC_CREAT | 0600);
	OK("semget", semid);
	union semun u = { .val = 2 };
	OK("SETVAL 1 = 2", semctl(semid, 1, SETVAL, u));
	struct sembuf two[2] = { { 1, -1, IPC_NOWAIT }, { 2, 1, 0 } };
	OK("semop [1]-1 [2]+1", semop(semid, two, 2));
	struct sembuf none[2] = { { 1, -1, 0 }, { 0, -1, IPC_NOWAIT } };
	SHOW("semop all or nothing", semop(semid, none, 2));
	SHOW("GETVAL 1", semctl(semid, 1, GETVAL));
	struct sembuf z = { 2, 0, IPC_NOWAIT };
	SHOW("wait for zero, IPC_NOWAIT", semop(semid, &z, 1));
	struct sembuf big = { 5, 1, 0 };
	SHOW("semnum out of range", semop(semid, &big, 1));
	u.val = 40000;
	SHOW("SETVAL 40000", semctl(semid, 0, SETVAL, u));
	unsigned short all[3];
	u.array = all;
	OK("GETALL", semctl(semid, 0, GETALL, u));
	printf("values %d %d %d\n", all[0], all[1], all[2]);
	struct sembuf t0 = { 0, -1, 0 };
	struct timespec ts = { 0, 50000000 };
	SHOW("semtimedop 50 ms", semtimedop(semid, &t0, 1, &ts));
	printf("GETPID self %d\n", semctl(semid, 1, GETPID) == getpid());
	struct semid_ds ds;
	u.buf = &ds;
	OK("IPC_STAT", semctl(semid, 0, IPC_STAT, u));
	printf("nsems %lu, mode %o\n", (unsigned long)ds.sem_nsems, ds.sem_perm.mode & 0777);

	pthread_t t;
	pthread_create(&t, 0, sem_waiter, 0);
	usleep(50000);
	SHOW("GETNCNT while the thread waits", semctl(semid, 0, GETNCNT));
	printf("main: semop +1\n");
	struct sembuf up = { 0, 1, 0 };
	semop(semid, &up, 1);
	pthread_join(t, 0);
	pthread_create(&t, 0, sem_waiter, 0);
	usleep(50000);
	printf("main: IPC_RMID\n");
	semctl(semid, 0, IPC_RMID);
	pthread_join(t, 0);
	SHOW("semop after IPC_RMID", semop(semid, &up, 1));
}

struct msg {
	long type;
	char text[64];
};

static int msqid;
static void *msg_waiter(void *a)
{
	(void)a;
	struct msg m = { 0 };
	printf("thread: msgrcv type 7\n");
	long n = msgrcv(msqid, &m, sizeof m.text, 7, 0);
	printf("thread: msgrcv %ld type %ld \"%s\"\n", n, m.type, m.text);
	return 0;
}

static long send(long type, const char *s, int flags)
{
	struct msg m = { type };
	strcpy(m.text, s);
	return msgsnd(msqid, &m, strlen(s) + 1, flags);
}

static void recv(const char *label, long type, size_t size, int flags)
{
	struct msg m = { 0 };
	long n = msgrcv(msqid, &m, size, type, flags | IPC_NOWAIT);
	if (n < 0)
		printf("%-44s -1 %s\n", label, en(errno));
	else
		printf("%-44s %ld type %ld \"%.*s\"\n", label, n, m.type, (int)n, m.text);
}

static void sysv_msg(void)
{
	printf("-- System V message queues\n");
	msqid = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
	OK("msgget", msqid);
	OK("send type 3", send(3, "three", 0));
	OK("send type 1", send(1, "one", 0));
	OK("send type 2", send(2, "two", 0));
	SHOW("send type 0", send(0, "zero", 0));
	struct msqid_ds ds;
	OK("IPC_STAT", msgctl(msqid, IPC_STAT, &ds));
	printf("qnum %lu, cbytes %lu, qbytes %lu\n", (unsigned long)ds.msg_qnum, (unsigned long)ds.__msg_cbytes,
	       (unsigned long)ds.msg_qbytes);
	recv("msgrcv type 2", 2, 64, 0);
	recv("msgrcv type -5 (lowest)", -5, 64, 0);
	recv("msgrcv size 2", 0, 2, 0);
	recv("msgrcv size 2, MSG_NOERROR", 0, 2, MSG_NOERROR);
	recv("msgrcv, empty", 0, 64, 0);
	OK("send type 4", send(4, "four", 0));
	OK("send type 5", send(5, "five", 0));
	recv("msgrcv 4, MSG_EXCEPT", 4, 64, MSG_EXCEPT);
	recv("msgrcv any", 0, 64, 0);
	static char big[8192 + 8];
	SHOW("msgsnd 8193 bytes", msgsnd(msqid, big, 8193, 0));
	((long *)big)[0] = 1;
	OK("msgsnd 8192", msgsnd(msqid, big, 8192, IPC_NOWAIT));
	OK("msgsnd 8192", msgsnd(msqid, big, 8192, IPC_NOWAIT));
	SHOW("msgsnd to a full queue, IPC_NOWAIT", msgsnd(msqid, big, 1, IPC_NOWAIT));
	struct msg m;
	msgrcv(msqid, &m, 0, 0, MSG_NOERROR);
	msgrcv(msqid, &m, 0, 0, MSG_NOERROR);

	pthread_t t;
	pthread_create(&t, 0, msg_waiter, 0);
	usleep(50000);
	printf("main: send type 6 and 7\n");
	send(6, "six", 0);
	send(7, "seven", 0);
	pthread_join(t, 0);
	recv("left in the queue", 0, 64, 0);
	pthread_create(&t, 0, msg_waiter, 0);
	usleep(50000);
	printf("main: IPC_RMID\n");
	long rm = msgctl(msqid, IPC_RMID, 0);
	pthread_join(t, 0);
	OK("IPC_RMID", rm);
	SHOW("msgsnd after IPC_RMID", send(1, "x", 0));
}

int main(void)
{
	snprintf(name, sizeof name, "/sys_ipc_shm.%d", getpid());
	snprintf(sname, sizeof sname, "/sys_ipc_sem.%d", getpid());
	posix_shm();
	posix_sem();
	sysv_shm(0x51500000 | (getpid() & 0xffff));
	sysv_sem();
	sysv_msg();
	printf("done\n");
	return 0;
}
