from syncer.cli import main

raise SystemExit(main())
