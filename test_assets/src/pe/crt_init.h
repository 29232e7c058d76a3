/* Minimal stand-in for the MSVC CRT's constructor walk: the linker sorts
 * .CRT$XCA < .CRT$XCU (the TUs' module constructors) < .CRT$XCZ and merges
 * them into .rdata (/merge:.CRT=.rdata, as the real CRT requests). */
#pragma section(".CRT$XCA", read)
#pragma section(".CRT$XCZ", read)

typedef void(__cdecl *ctor_fn)(void);
__declspec(allocate(".CRT$XCA")) __attribute__((used)) static const ctor_fn xc_a = 0;
__declspec(allocate(".CRT$XCZ")) __attribute__((used)) static const ctor_fn xc_z = 0;

static void run_ctors(void) {
  /* volatile: the walk must not be folded away by the optimiser, which
   * cannot know that the linker places XCU entries between XCA and XCZ. */
  for (const ctor_fn *volatile p = &xc_a + 1; p < &xc_z; ++p)
    if (*p)
      (*p)();
}
