BlossJä%
@