/* dynsites: a dynamically linked program calling into libsites.so (see
 * there). Prints the first byte of the library's `mov eax, 39; syscall`
 * pair before and after calling it (0xb8, the `mov`, natively; on shoal
 * 0xe9 after the first call: a `jmp` to the kernel's trampoline), then
 * checks that 100000 calls through the pair and through a jump to the
 * middle of a pair all give getpid(). */
#include <stdio.h>
#include <unistd.h>

long lib_pair(void);
long lib_middle(void);
const unsigned char *lib_site(int which);

int main(void)
{
	long pid = getpid();
	printf("pair before: %02x\n", lib_site(0)[0]);
	long a = lib_pair();
	printf("pair after: %02x\n", lib_site(0)[0]);
	long b = lib_middle();
	printf("middle after: %02x\n", lib_site(1)[0]);
	long bad = 0;
	for (int i = 0; i < 100000; i++)
		bad += lib_pair() != pid;
	for (int i = 0; i < 1000; i++)
		bad += lib_middle() != pid;
	printf("agree: %d %d, %ld wrong\n", a == pid, b == pid, bad);
	return 0;
}
