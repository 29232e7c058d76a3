# A discardable data section for hip_dbg.dll (../../build_pe.sh).  lld-link
# sorts discardable output sections behind all others, so with
# /merge:.buildid=.dbgtail the debug directory and its CodeView record (which
# lld puts in .buildid in /lldmingw mode) land after .hip_fat: their file
# offsets move when the transform drops .hip_fat's pages.  clang's
# `#pragma section` has no "discard" flag, hence assembly ("D" = discardable).
	.section .dbgtail,"drD"
	.asciz "hip_dbg.dll: debug directory follows"
